package muxd

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"sluice/internal/config"
	"sluice/internal/metrics"
	"sluice/internal/pool"
	"sluice/internal/poolstatus"
	"sluice/internal/status"
	"sluice/internal/web"
)

// webServer is the multiplexor's web server: the pool's slots on the status
// page, and its metrics (slot states, queue, activations, kills by
// reason, busy timeouts).
type webServer struct {
	m    *metrics.Metrics
	srv  *web.Server
	ln   net.Listener
	done chan error
	p    *pool.Pool
	ver  string
	// keepPath is set once the socket is handed over: its path is the
	// new multiplexor's.
	keepPath bool
}

// newWebServer binds spec, or takes passed, the socket an upgrade handed
// over; serve starts it once the pool exists.
func newWebServer(spec, version string, passed net.Listener) (*webServer, error) {
	network, addr, err := config.ParseListen(spec)
	if err != nil {
		return nil, fmt.Errorf("status page %s: %w", spec, err)
	}
	if passed != nil {
		return newWebOn(passed, version)
	}
	if network == "unix" {
		if fi, err := os.Lstat(addr); err == nil && fi.Mode()&os.ModeSocket != 0 {
			_ = os.Remove(addr)
		}
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		return nil, fmt.Errorf("status page %s: %w", spec, err)
	}
	if network == "unix" {
		if err := os.Chmod(addr, 0o660); err != nil {
			ln.Close()
			return nil, fmt.Errorf("status page %s: %w", spec, err)
		}
	}
	return newWebOn(ln, version)
}

// newWebOn is the web server on the listening socket ln.
func newWebOn(ln net.Listener, version string) (*webServer, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := metrics.New(reg, metrics.PartPool|metrics.PartPoolEvents) // a pool, no limiter or config
	if err != nil {
		ln.Close()
		return nil, err
	}
	w := &webServer{m: m, ln: ln, done: make(chan error, 1), ver: version}
	w.srv = web.New(web.Options{Source: web.SourceFunc(w.status), Gatherer: reg, Logger: slog.New(slog.DiscardHandler)})
	return w, nil
}

// statsEvent counts the pool's kills by reason.
func (w *webServer) statsEvent(ev pool.StatsEvent) {
	if ev.Event != "KillWorker" {
		return
	}
	_, reason, _ := strings.Cut(ev.Extra, `reason="`)
	reason = strings.TrimSuffix(reason, `"`)
	r := metrics.KillReasonOf(reason)
	w.m.PoolKill(r)
	if r == metrics.KillBusyTimeout {
		w.m.PoolBusyTimeout()
	}
}

func (w *webServer) serve(p *pool.Pool) {
	w.p = p
	go func() { w.done <- w.srv.Serve(w.ln) }()
}

// handedOver says whether the socket is another process's now: its path
// is then left in place when this server closes.
func (w *webServer) handedOver(yes bool) {
	w.keepPath = yes
	if ul, ok := w.ln.(*net.UnixListener); ok {
		ul.SetUnlinkOnClose(!yes)
	}
}

func (w *webServer) close() {
	if w.p == nil { // never served
		w.ln.Close()
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.srv.Shutdown(ctx)
		<-w.done
	}
	if ua, ok := w.ln.Addr().(*net.UnixAddr); ok && !w.keepPath {
		_ = os.Remove(ua.Name)
	}
}

// status is the pool as the status page shows it; the metrics' gauges
// are refreshed with it.
func (w *webServer) status() status.Status {
	st := status.Status{Version: w.ver, Now: time.Now(), Doors: []status.Door{{Name: "mux"}}}
	if w.p == nil {
		return st
	}
	sn, ok := w.p.Snapshot()
	if !ok {
		return st
	}
	st.Now, st.Started = sn.Now, sn.Start
	st.Pool = poolstatus.FromSnapshot(sn)
	w.m.Pool(poolstatus.Gauges(st.Pool))
	return st
}
