package cli

import (
	"fmt"
	"io"
	"net"
	"slices"
	"strings"

	"sluice/internal/config"
)

// printMilter shows the [milter] section as `sluice check` understood it.
func printMilter(w io.Writer, cfg *config.Config) {
	m := cfg.Milter
	if !m.Enabled {
		fmt.Fprintln(w, "\nmilter service: off")
		return
	}
	fmt.Fprintf(w, "\nmilter service: %s%s\n", strings.Join(m.Listen, ", "), socketText(m.Listen, m.Socket))
	fmt.Fprintf(w, "  at most %d sessions; %d workers run the rules, %d events may wait (then: %s); idle sessions end after %s; packets up to %d bytes\n",
		m.MaxSessions, m.Workers, m.Queue, m.QueueFull, m.IdleTimeout.D(), m.MaxPacket)
	fmt.Fprintf(w, "  a full class (refuse cap) is told at CONNECT: %s\n", m.RefuseText)
	if m.PauseWhenFull {
		fmt.Fprintln(w, "  while every class with a refuse cap is full, new milter connections wait (pause_when_full)")
	}
	if m.PolicyRules {
		fmt.Fprintln(w, "  the [[policy.rule]] tables also apply at the milter's stages (policy_context \"milter\")")
	} else {
		fmt.Fprintln(w, "  class caps only (policy_rules = false): the MTA is asked for CONNECT alone")
	}
}

// printWeb shows the [web] section as `sluice check` understood it.
func printWeb(w io.Writer, cfg *config.Config) {
	wb := cfg.Web
	if len(wb.Listen) == 0 {
		fmt.Fprintln(w, "\nweb status page: off (no [web] listen; `sluice status` needs one)")
		return
	}
	fmt.Fprintf(w, "\nweb status page: %s%s\n", strings.Join(wb.Listen, ", "), socketText(wb.Listen, wb.Socket))
	var open []string
	for _, l := range wb.Listen {
		if network, addr, err := config.ParseListen(l); err == nil && network == "tcp" {
			host, _, _ := net.SplitHostPort(addr)
			if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
				open = append(open, l)
			}
		}
	}
	if len(open) > 0 {
		fmt.Fprintf(w, "  !! %s is not loopback: the page shows client addresses and senders to whoever reaches it\n", strings.Join(open, ", "))
	}
	if wb.Metrics {
		fmt.Fprintln(w, "  serves /, /status.json and /metrics (Prometheus)")
	} else {
		fmt.Fprintln(w, "  serves / and /status.json; /metrics off")
	}
	if hasInet(wb.Listen) && !wb.StatusOnInet {
		fmt.Fprintln(w, "  inet listeners serve /metrics only ([web] status_on_inet = false)")
	}
	if wb.MaxStreams == 0 {
		fmt.Fprintln(w, "  live streams off: pages poll /status.json")
	} else {
		fmt.Fprintf(w, "  at most %d live streams; more pages poll /status.json\n", wb.MaxStreams)
	}
	if wb.MuxSocket != "" {
		fmt.Fprintf(w, "  worker pool: asks the multiplexor at %s\n", wb.MuxSocket)
	} else {
		fmt.Fprintln(w, "  worker pool: none shown (no mux_socket)")
	}
}

// socketText is the unix socket settings, when a listener is a unix
// socket.
func socketText(listen []string, s config.Socket) string {
	unix := false
	for _, l := range listen {
		unix = unix || strings.HasPrefix(l, "unix:")
	}
	if !unix {
		return ""
	}
	t := " (sockets mode " + s.Mode
	if s.Owner != "" {
		t += ", owner " + s.Owner
	}
	if s.Group != "" {
		t += ", group " + s.Group
	}
	return t + ")"
}

// hasInet reports whether a listen list has an inet listener.
func hasInet(listen []string) bool {
	for _, l := range listen {
		if network, _, err := config.ParseListen(l); err == nil && network == "tcp" {
			return true
		}
	}
	return false
}

// printControl shows the control socket and who may use it.
func printControl(w io.Writer, cfg *config.Config) {
	k := cfg.Control
	if !k.Enabled {
		fmt.Fprintln(w, "\ncontrol socket: off (sluice key, explain, exempt and throttle suspend need it)")
		return
	}
	who := "root and sluice's user"
	if k.AdminGroup != "" {
		who += " and group " + k.AdminGroup
	}
	fmt.Fprintf(w, "\ncontrol socket: %s (mode 0660; commands from %s, each logged with its uid and pid)\n", cfg.ControlSocket(), who)
}

// printClassOrigins says, when include_dir merged files, where each class
// came from and where a class a file adds goes.
func printClassOrigins(w io.Writer, cfg *config.Config) {
	specs, errs := cfg.ClassTable()
	if len(cfg.Included) == 0 || len(errs) > 0 {
		return
	}
	fmt.Fprintf(w, "class origins (a class an include_dir file adds goes just before the catch-all %q, the files in name order; one whose name is already there is changed in place):\n", specs[len(specs)-1].Name)
	for _, s := range specs {
		from := s.Where
		switch {
		case slices.Contains(cfg.Included, s.File):
			from = "added by " + s.Where
		case s.Where != s.File && !strings.HasPrefix(s.Where, s.File+":"):
			from = s.File + ", changed by " + s.Where
		}
		fmt.Fprintf(w, "  %-16s %s\n", s.Name, from)
	}
}
