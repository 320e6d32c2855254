package mux

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"
)

// NewEventLogHandler is the -d trace: each record becomes one line,
// "<sec%1000>.<ms> <message>[ key=value...]", the reference's event-debug
// time stamp, written at once. Lines are sluice's own (docs/mux.md, "Deliberate differences from the reference", and docs/protocols/mimedefang-multiplexor.md, "Logging"; also package
// mux's list of differences).
func NewEventLogHandler(w io.Writer) slog.Handler {
	return &eventLogHandler{w: w, mu: &sync.Mutex{}}
}

type eventLogHandler struct {
	w     io.Writer
	mu    *sync.Mutex
	attrs []slog.Attr
}

func (h *eventLogHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *eventLogHandler) Handle(_ context.Context, r slog.Record) error {
	t := r.Time
	if t.IsZero() {
		t = time.Now()
	}
	line := fmt.Sprintf("%03d.%03d %s", t.Unix()%1000, t.Nanosecond()/1e6, r.Message)
	for _, a := range h.attrs {
		line += fmt.Sprintf(" %s=%v", a.Key, a.Value)
	}
	r.Attrs(func(a slog.Attr) bool {
		line += fmt.Sprintf(" %s=%v", a.Key, a.Value)
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, line+"\n")
	return err
}

func (h *eventLogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(c.attrs[:len(c.attrs):len(c.attrs)], as...)
	return &c
}

func (h *eventLogHandler) WithGroup(string) slog.Handler { return h }
