// Package web is sluice's read-only HTTP front end: Prometheus metrics at
// /metrics, a self-contained status page at /, its live feed as
// server-sent events at /events and the same facts as JSON at
// /status.json.
//
// The facts come from a Source (the daemon implements it); the server
// samples it once a second in a goroutine of its own, keeps a short
// history of those samples and hands every viewer of the page and its
// event stream the same snapshot. /status.json is fresher: a request
// finding the newest sample older than Options.Fresh (100 ms) takes the
// Source's status for itself, one at a time and shared by the requests
// waiting for it, so viewers cost the daemon at most ten statuses a
// second however many they are. Only GET and HEAD are served.
//
// What a listener serves depends on its network: a unix socket serves
// everything, a TCP listener /metrics only (the page shows clients'
// addresses and senders, and any local account can reach a loopback
// port) unless Options.StatusOnTCP allows the page there. Open
// connections are capped per listener (Options.MaxConns), so a flood on
// a TCP listener cannot take the unix socket's places.
package web

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"sluice/internal/clock"
	"sluice/internal/status"
)

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = http.ErrServerClosed

// Source gives the daemon's state. Status is called from the server's
// sampling goroutine once per Interval, and by /status.json requests at
// most once per Options.Fresh (see the package comment); it must be safe
// to call concurrently with itself and the daemon's work, return
// promptly, and put nothing secret in its result.
type Source interface {
	Status() status.Status
}

// SourceFunc adapts a function to Source.
type SourceFunc func() status.Status

// Status calls f.
func (f SourceFunc) Status() status.Status { return f() }

// DefaultMaxStreams is MaxStreams when it is 0: config's default for
// web.max_streams (a test in internal/app fails if the two drift).
const DefaultMaxStreams = 16

// Options configure a Server. Source is required.
type Options struct {
	Source Source
	// Gatherer is served at /metrics; nil leaves /metrics unserved (404).
	Gatherer prometheus.Gatherer
	// Logger gets the server's log lines (default slog.Default()).
	Logger *slog.Logger
	// Clock paces the sampling (default the real clock).
	Clock clock.Clock
	// Interval between samples (default 1s).
	Interval time.Duration
	// Fresh is how old a status /status.json may serve (default 100ms):
	// older, the request takes one of its own (see the package comment).
	Fresh time.Duration
	// History is how many samples are kept (default 300: five minutes at
	// the default interval).
	History int
	// MaxStreams caps concurrent /events streams (default
	// DefaultMaxStreams, as config's web.max_streams); more are
	// answered 503 and the page falls back to polling /status.json.
	// Negative: no streams at all, the page always polls.
	MaxStreams int
	// StreamMaxAge ends an event stream after this long (default 10m); the
	// browser reconnects by itself, so a stream never outlives a proxy's
	// patience or pins a slot for ever.
	StreamMaxAge time.Duration
	// MaxRows caps the talkers and refusals served (default 50).
	MaxRows int
	// MaxSlots caps the pool slots served (default 1024).
	MaxSlots int
	// StatusOnTCP serves the status page, its assets, /events and
	// /status.json on TCP listeners too. Without it a TCP listener serves
	// /metrics only and answers every other path 404; unix socket
	// listeners always serve everything.
	StatusOnTCP bool
	// StatusSetting names, in that 404's body, the setting that sets
	// StatusOnTCP (sluice serve: "[web] status_on_inet = true"); empty
	// names none.
	StatusSetting string
	// MaxConns caps each listener's open connections (default
	// DefaultMaxConns, as config's web.max_conns); more are closed as
	// soon as they are accepted, with a log line at 1, 2, 4, 8...
	// refusals.
	MaxConns int
	// MaxConnsPerPeer caps one peer's open connections on each listener
	// (default DefaultMaxConnsPerPeer, as config's web.max_conns_per_peer;
	// negative: no cap): a local user (its uid) on a unix socket or on
	// loopback TCP, else a host (its address), as netserve.PeerLimits
	// tells them apart. More are closed as soon as they are accepted,
	// with a log line at each peer's 1st, 2nd, 4th... refusal, and other
	// peers still get in.
	MaxConnsPerPeer int
}

// Server is the web front end. Create it with New, run it with Serve and
// stop it with Shutdown or Close.
type Server struct {
	o           Options
	log         *slog.Logger
	handler     http.Handler // every route
	metricsOnly http.Handler // /metrics only: TCP listeners without StatusOnTCP
	srv         *http.Server
	conns       atomic.Int64 // open connections, for MaxConns
	refused     atomic.Int64 // connections closed for MaxConns

	ctx     context.Context // ends at Shutdown or Close: stops sampling and streams
	cancel  context.CancelFunc
	life    sync.Mutex // guards started and closed
	started bool
	closed  bool
	wg      sync.WaitGroup // the sampler

	mu   sync.Mutex // sampling state below
	hist *ring
	prev status.Totals
	last time.Time // time of the previous sample; zero before the first

	cur     atomic.Pointer[frame]
	streams atomic.Int64

	freshMu  sync.Mutex // one fresh status at a time (fresh)
	freshest *frame     // the last one taken, guarded by freshMu
}

// frame is one published snapshot. st and hist are never changed after
// publication; next is closed when a newer frame replaces this one.
type frame struct {
	seq  uint64
	st   *status.Status // nil before the first sample
	at   time.Time      // when st was taken
	hist []status.Sample
	next chan struct{}
}

// New returns a Server; it starts no goroutine until Serve.
func New(o Options) *Server {
	if o.Source == nil {
		panic("web: Options.Source is nil")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.Fresh <= 0 {
		o.Fresh = 100 * time.Millisecond
	}
	if o.History <= 0 {
		o.History = 300
	}
	if o.MaxStreams == 0 {
		o.MaxStreams = DefaultMaxStreams
	}
	if o.StreamMaxAge <= 0 {
		o.StreamMaxAge = 10 * time.Minute
	}
	if o.MaxRows <= 0 {
		o.MaxRows = 50
	}
	if o.MaxSlots <= 0 {
		o.MaxSlots = 1024
	}
	if o.MaxConns <= 0 {
		o.MaxConns = DefaultMaxConns
	}
	if o.MaxConnsPerPeer == 0 {
		o.MaxConnsPerPeer = DefaultMaxConnsPerPeer
	}
	s := &Server{o: o, log: o.Logger, hist: newRing(o.History)}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.cur.Store(&frame{next: make(chan struct{})})
	s.handler, s.metricsOnly = s.routes()
	s.srv = &http.Server{
		Handler:     http.HandlerFunc(s.serveHTTP),
		ConnContext: connContext,
		// A connection that sends nothing is closed after
		// ReadHeaderTimeout, one idle between requests after IdleTimeout:
		// neither holds a place under MaxConns for long.
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		// No WriteTimeout: event streams are long. Each write sets its own
		// deadline instead (see writeDeadline).
		IdleTimeout:    60 * time.Second,
		MaxHeaderBytes: 16 << 10,
		ErrorLog:       slog.NewLogLogger(o.Logger.Handler(), slog.LevelWarn),
	}
	return s
}

// Serve starts the sampler (once per Server) and serves HTTP on l until
// Shutdown or Close, then returns ErrServerClosed. A unix socket listener
// serves every route; any other listener /metrics only, unless
// Options.StatusOnTCP. Serve may be called for several listeners; each
// has Options.MaxConns places of its own, and Options.MaxConnsPerPeer for
// each peer.
func (s *Server) Serve(l net.Listener) error {
	s.life.Lock()
	if s.closed {
		s.life.Unlock()
		l.Close()
		return ErrServerClosed
	}
	if !s.started {
		s.started = true
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.run(s.ctx)
		}()
	}
	s.life.Unlock()
	return s.srv.Serve(s.limit(l))
}

// Shutdown stops sampling, ends every event stream, stops accepting and
// waits for requests in progress until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stop()
	err := s.srv.Shutdown(ctx)
	s.wg.Wait()
	// The daemon closes every door's listener before it drains them: when
	// that close reaches the server before Serve has returned, the
	// server's own close of the same listener reports it closed already.
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// Close stops at once: listeners and connections are closed.
func (s *Server) Close() error {
	s.stop()
	err := s.srv.Close()
	s.wg.Wait()
	return err
}

func (s *Server) stop() {
	s.life.Lock()
	s.closed = true
	s.life.Unlock()
	s.cancel()
}

// run samples every Interval until ctx ends.
func (s *Server) run(ctx context.Context) {
	s.sample()
	for {
		t := s.o.Clock.NewTimer(s.o.Interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
			s.sample()
		}
	}
}

// The security headers every response carries. The page loads only its
// own script, style sheet and icon; its script opens only /events and
// /status.json.
const csp = "default-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// routes returns the handler of every route and the one of /metrics
// alone (every other path answered by notOnTCP).
func (s *Server) routes() (all, metricsOnly http.Handler) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.servePage)
	for _, name := range []string{"app.js", "style.css", "favicon.svg"} {
		mux.HandleFunc("GET /"+name, serveAsset(name))
	}
	mux.HandleFunc("GET /status.json", s.serveJSON)
	mux.HandleFunc("GET /events", s.serveEvents)
	tcp := http.NewServeMux()
	tcp.HandleFunc("/", s.notOnTCP)
	if s.o.Gatherer != nil {
		metrics := promhttp.HandlerFor(s.o.Gatherer, promhttp.HandlerOpts{
			ErrorLog:            slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
			ErrorHandling:       promhttp.ContinueOnError,
			MaxRequestsInFlight: 4,
			Timeout:             10 * time.Second,
		})
		mux.Handle("GET /metrics", metrics)
		tcp.Handle("GET /metrics", metrics)
	} else {
		tcp.HandleFunc("/metrics", http.NotFound)
	}
	return readOnly(mux), readOnly(tcp)
}

// readOnly sets the security headers on every response and answers any
// method but GET and HEAD 405.
func readOnly(mux http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "read-only: only GET and HEAD", http.StatusMethodNotAllowed)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

//go:embed assets
var assetFS embed.FS

type asset struct {
	body  []byte
	ctype string
	etag  string
}

var assets = func() map[string]asset {
	m := map[string]asset{}
	ents, err := assetFS.ReadDir("assets")
	if err != nil {
		panic(err)
	}
	for _, e := range ents {
		b, err := assetFS.ReadFile("assets/" + e.Name())
		if err != nil {
			panic(err)
		}
		sum := sha256.Sum256(b)
		ctype := mime.TypeByExtension(path.Ext(e.Name()))
		switch path.Ext(e.Name()) { // not left to the system's mime tables
		case ".html":
			ctype = "text/html; charset=utf-8"
		case ".js":
			ctype = "text/javascript; charset=utf-8"
		case ".css":
			ctype = "text/css; charset=utf-8"
		case ".svg":
			ctype = "image/svg+xml"
		}
		m[e.Name()] = asset{body: b, ctype: ctype, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
	}
	return m
}()

func serveAsset(name string) http.HandlerFunc {
	a, ok := assets[name]
	if !ok {
		panic("web: no embedded asset " + name)
	}
	return func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", a.ctype)
		h.Set("ETag", a.etag)
		h.Set("Cache-Control", "no-cache")
		if match := r.Header.Get("If-None-Match"); match != "" && strings.Contains(match, a.etag) {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		h.Set("Content-Length", strconv.Itoa(len(a.body)))
		if r.Method == http.MethodHead {
			return
		}
		_, _ = w.Write(a.body)
	}
}

// errStreamsFull refuses an event stream past MaxStreams.
var errStreamsFull = errors.New("too many event streams; poll /status.json")
