// Command hostile measures what issue 25's adversaries cost a root-started
// sluice (docs/security.md): how long the start takes and how much memory
// it keeps when the daemon's user planted a link to /dev/zero, a FIFO or
// a 1 GiB sparse file as the store snapshot; how long a SIGTERM takes to
// end a start that waits on a Redis server that never answers; and, under
// a flood of idle connections to the web server's inet listener, how many
// descriptors the daemon holds and whether the status page still answers
// on the unix socket. bench/hostile.sh runs it; it prints one line per
// figure.
//
// It must run as root, with a system user sluice (adduser --system
// --group sluice), from the repository's root.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() {
	conns := flag.Int("conns", 19000, "idle connections of the web flood (the process's descriptor limit bounds it)")
	flag.Parse()
	if err := run(*conns); err != nil {
		fmt.Fprintln(os.Stderr, "hostile:", err)
		os.Exit(1)
	}
}

func run(conns int) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("run as root: the start under test is a root start with user = \"sluice\"")
	}
	top, err := os.MkdirTemp("", "sluice-hostile")
	if err != nil {
		return err
	}
	defer os.RemoveAll(top)
	if err := os.Chmod(top, 0o755); err != nil {
		return err
	}
	bin := filepath.Join(top, "sluice")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/sluice").CombinedOutput(); err != nil {
		return fmt.Errorf("build sluice: %v\n%s", err, out)
	}
	for _, plant := range []struct{ name, cmd string }{
		{"snapshot -> /dev/zero", "ln -s /dev/zero store.snapshot"},
		{"snapshot FIFO", "mkfifo store.snapshot"},
		{"snapshot 1 GiB sparse", "truncate -s 1G store.snapshot"},
	} {
		if err := hostileState(bin, top, plant.name, plant.cmd); err != nil {
			return err
		}
	}
	if err := stopWhileStarting(bin, top); err != nil {
		return err
	}
	return flood(bin, top, conns)
}

// daemon is a started `sluice serve`, its log a line at a time.
type daemon struct {
	cmd   *exec.Cmd
	lines chan string
	log   strings.Builder
}

func start(bin string, args ...string) (*daemon, error) {
	d := &daemon{cmd: exec.Command(bin, args...), lines: make(chan string, 1024)}
	r, err := d.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := d.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		defer close(d.lines)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			d.lines <- sc.Text()
		}
	}()
	return d, nil
}

// waitFor reads the log until a line holds s, or the log ends.
func (d *daemon) waitFor(s string, limit time.Duration) error {
	deadline := time.After(limit)
	for {
		select {
		case l, ok := <-d.lines:
			if !ok {
				return fmt.Errorf("sluice ended before %q:\n%s", s, d.log.String())
			}
			d.log.WriteString(l + "\n")
			if strings.Contains(l, s) {
				return nil
			}
		case <-deadline:
			return fmt.Errorf("no %q after %v:\n%s", s, limit, d.log.String())
		}
	}
}

func (d *daemon) stop() {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	for range d.lines {
	}
	_ = d.cmd.Wait()
}

// writeConfig writes dir/sluice.toml with body after the directories.
func writeConfig(dir, body string) (string, error) {
	p := filepath.Join(dir, "sluice.toml")
	text := fmt.Sprintf("state_dir = %q\nruntime_dir = %q\n%s", filepath.Join(dir, "state"), filepath.Join(dir, "run"), body)
	return p, os.WriteFile(p, []byte(text), 0o644)
}

// hostileState plants (as user sluice) in the state directory, starts
// sluice as root with user = "sluice", and prints the time to serving,
// its RSS and its ERROR lines.
func hostileState(bin, top, name, plant string) error {
	dir, err := os.MkdirTemp(top, "state")
	if err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	state := filepath.Join(dir, "state")
	setup := fmt.Sprintf("install -d -o sluice -g sluice -m 0750 %s && cd %s && setpriv --reuid=sluice --regid=sluice --clear-groups %s", state, state, plant)
	if out, err := exec.Command("sh", "-c", setup).CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %v\n%s", name, err, out)
	}
	cfg, err := writeConfig(dir, "user = \"sluice\"\n")
	if err != nil {
		return err
	}
	t0 := time.Now()
	d, err := start(bin, "serve", "-c", cfg)
	if err != nil {
		return err
	}
	defer d.stop()
	if err := d.waitFor("sluice started", 60*time.Second); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	took := time.Since(t0)
	fmt.Printf("hostile %-22s serving after %6.3f s, RSS %6d kB, ERROR lines %d\n",
		name+":", took.Seconds(), rss(d.cmd.Process.Pid), strings.Count(d.log.String(), "level=ERROR"))
	return nil
}

// rss is a process's VmRSS in kB (0 if unknown).
func rss(pid int) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		var n int
		if _, err := fmt.Sscanf(l, "VmRSS: %d kB", &n); err == nil {
			return n
		}
	}
	return 0
}

// stopWhileStarting starts sluice (as root with user = "sluice", through
// the root phase) on a Redis server that accepts and never answers, and
// prints how long SIGTERM takes to end it.
func stopWhileStarting(bin, top string) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer l.Close()
	dir, err := os.MkdirTemp(top, "redis")
	if err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	cfg, err := writeConfig(dir, fmt.Sprintf("user = \"sluice\"\n[store]\nkind = \"redis\"\n[store.redis]\naddrs = [%q]\ndial_timeout = \"60s\"\n", l.Addr()))
	if err != nil {
		return err
	}
	d, err := start(bin, "serve", "-c", cfg)
	if err != nil {
		return err
	}
	c, err := l.Accept() // the start now waits on Redis
	if err != nil {
		return err
	}
	defer c.Close()
	t0 := time.Now()
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	for range d.lines {
	}
	err = d.cmd.Wait()
	fmt.Printf("hostile SIGTERM while the start waits on Redis (dial_timeout 60s): ended after %.3f s (%v)\n", time.Since(t0).Seconds(), err)
	return nil
}

// flood opens n idle connections to the web server's inet listener and
// prints the daemon's descriptors and the unix socket's answer meanwhile.
func flood(bin, top string, n int) error {
	dir, err := os.MkdirTemp(top, "web")
	if err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	cfg, err := writeConfig(dir, "user = \"sluice\"\n[web]\nlisten = [\"unix:web\", \"inet:127.0.0.1:0\"]\n")
	if err != nil {
		return err
	}
	d, err := start(bin, "serve", "-c", cfg)
	if err != nil {
		return err
	}
	defer d.stop()
	if err := d.waitFor("listen=inet:", 30*time.Second); err != nil {
		return err
	}
	addr := d.log.String()[strings.LastIndex(d.log.String(), "addr=")+len("addr="):]
	addr = strings.Fields(addr)[0]
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for len(held) < n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			break // this process's descriptor limit
		}
		held = append(held, c)
	}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", d.cmd.Process.Pid))
	client := http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "unix", filepath.Join(dir, "run", "web"))
	}}}
	code := "no answer"
	if resp, err := client.Get("http://sluice/status.json"); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		code = resp.Status
	}
	fmt.Printf("hostile web flood: %d idle connections to %s; daemon descriptors %d; /status.json on the unix socket: %s\n", len(held), addr, len(fds), code)
	return nil
}
