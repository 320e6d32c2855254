package config

import (
	"fmt"
	"strings"
)

// Web configures the read-only HTTP server: the live status page,
// /status.json and Prometheus's /metrics.
type Web struct {
	// Listen lists "inet:HOST:PORT" or "unix:PATH" addresses; empty turns
	// the server off. The default, the socket "web" in runtime_dir, is
	// what `sluice status` finds without flags and opens no TCP port. A
	// unix socket serves the status page, /status.json and /metrics; an
	// inet address serves /metrics only, unless status_on_inet. Bind TCP
	// to loopback unless a proxy in front of it controls access.
	Listen []string `toml:"listen"`
	// Socket sets the owner, group and mode of unix sockets.
	Socket Socket `toml:"socket"`
	// Metrics serves /metrics for Prometheus.
	Metrics bool `toml:"metrics"`
	// StatusOnInet serves the status page, /events and /status.json on the
	// inet listeners too, not only /metrics. The page shows clients'
	// addresses and senders, and any local account can connect to a
	// loopback port: set it only behind a proxy that controls access, and
	// read the page on a unix socket (whose owner, group and mode decide
	// who may) otherwise.
	StatusOnInet bool `toml:"status_on_inet"`
	// MaxConns caps each listener's open connections; more are closed at
	// once. Each listener has its own, so a flood on an inet listener
	// leaves the unix socket's places alone. It is far below the mail doors' caps: the clients
	// are a few scrapers, `sluice status` and at most max_streams pages.
	MaxConns int `toml:"max_conns"`
	// MaxConnsPerPeer caps one peer's open connections on each listener: a
	// local user (its uid) on a unix socket or a loopback address, where
	// every local account can connect, else a host (its IP address).
	// Beyond it that peer's new connections are closed while others still
	// get in, so that one local account cannot hold the inet listener's
	// places and keep Prometheus out of /metrics. A scraper holds one
	// connection, a browser at most six to one host. 0: no per-peer cap.
	MaxConnsPerPeer int `toml:"max_conns_per_peer"`
	// MaxStreams caps live-update streams (open status pages); beyond it
	// pages poll instead. Each holds a connection: it must be below
	// max_conns.
	MaxStreams int `toml:"max_streams"`
	// MuxSocket is the socket of a multiplexor (sluice mux or
	// mimedefang-multiplexor) whose worker pool the page shows; empty
	// shows none.
	MuxSocket string `toml:"mux_socket"`
}

func defaultWeb() Web {
	return Web{Listen: []string{"unix:web"}, Socket: Socket{Mode: "0660"}, Metrics: true, MaxConns: 256, MaxConnsPerPeer: 16, MaxStreams: 16}
}

func (c *Config) validateWeb() []error {
	w := c.Web
	var errs []error
	add := func(path, format string, args ...any) { errs = append(errs, c.errAt("web."+path, format, args...)) }
	for i, l := range w.Listen {
		if _, _, err := ParseListen(l); err != nil {
			add(fmt.Sprintf("listen[%d]", i+1), "%v", err)
		}
	}
	if field, err := w.Socket.check(); err != nil {
		add("socket."+field, "%v", err)
	}
	if w.MaxConns < 1 {
		add("max_conns", "must be at least 1")
	}
	if w.MaxConnsPerPeer < 0 {
		add("max_conns_per_peer", "must be at least 0 (no per-peer cap)")
	}
	if w.MaxStreams < 0 || w.MaxStreams > 1024 {
		add("max_streams", "must be between 0 and 1024")
	} else if w.MaxConns >= 1 && w.MaxStreams >= w.MaxConns {
		add("max_streams", "must be below web.max_conns (%d): each stream holds a connection, and /metrics needs one too", w.MaxConns)
	}
	if w.MuxSocket != "" && strings.HasPrefix(w.MuxSocket, "inet") {
		add("mux_socket", "%q: the multiplexor's main socket is a unix socket path", w.MuxSocket)
	}
	return errs
}
