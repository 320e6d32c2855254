package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"sluice/internal/status"
)

// ring holds the last n history samples.
type ring struct {
	buf  []status.Sample
	next int // where the next sample goes
	full bool
}

func newRing(n int) *ring { return &ring{buf: make([]status.Sample, n)} }

func (r *ring) add(s status.Sample) {
	r.buf[r.next] = s
	r.next++
	if r.next == len(r.buf) {
		r.next, r.full = 0, true
	}
}

// all returns a copy of the samples, oldest first.
func (r *ring) all() []status.Sample {
	if !r.full {
		return append([]status.Sample(nil), r.buf[:r.next]...)
	}
	out := make([]status.Sample, 0, len(r.buf))
	out = append(out, r.buf[r.next:]...)
	return append(out, r.buf[:r.next]...)
}

// sample takes the Source's status, adds a history sample and publishes a
// new frame to every viewer.
func (s *Server) sample() {
	st := s.o.Source.Status()
	now := s.o.Clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clean(&st, now)
	smp := status.Sample{T: now.UnixMilli()}
	if p := st.Pool; p != nil {
		smp.Slots = len(p.Slots)
		for _, sl := range p.Slots {
			if sl.State == status.SlotBusy {
				smp.Busy++
			}
		}
	}
	if !s.last.IsZero() {
		if secs := now.Sub(s.last).Seconds(); secs > 0 {
			smp.Decisions = rate(st.Totals.Decisions, s.prev.Decisions, secs)
			smp.Refusals = rate(st.Totals.Refusals, s.prev.Refusals, secs)
		}
	}
	s.prev, s.last = st.Totals, now
	s.hist.add(smp)
	old := s.cur.Load()
	s.cur.Store(&frame{seq: old.seq + 1, st: &st, at: now, hist: s.hist.all(), next: make(chan struct{})})
	close(old.next)
}

// rate is the per-second growth of a running count; a count that went
// down (the daemon's counters were reset) counts from zero.
func rate(now, before uint64, secs float64) float64 {
	if now < before {
		before = 0
	}
	return float64(now-before) / secs
}

// clean trims st to the server's caps and scrubs credentials from the
// free text a Source might have passed through.
func (s *Server) clean(st *status.Status, now time.Time) {
	if st.Now.IsZero() {
		st.Now = now
	}
	st.History = nil
	if len(st.Talkers) > s.o.MaxRows {
		st.Talkers = st.Talkers[:s.o.MaxRows]
	}
	if len(st.Refusals) > s.o.MaxRows {
		st.Refusals = st.Refusals[:s.o.MaxRows]
	}
	if st.Pool != nil && len(st.Pool.Slots) > s.o.MaxSlots {
		p := *st.Pool
		p.Slots = p.Slots[:s.o.MaxSlots]
		st.Pool = &p
	}
	// Copy before scrubbing: the Source may share these slices.
	if len(st.Doors) > 0 {
		doors := make([]status.Door, len(st.Doors))
		for i, d := range st.Doors {
			d.Listen = append([]string(nil), d.Listen...)
			for j := range d.Listen {
				d.Listen[j] = Redact(d.Listen[j])
			}
			doors[i] = d
		}
		st.Doors = doors
	}
	if len(st.Refusals) > 0 {
		ds := append([]status.Refusal(nil), st.Refusals...)
		for i := range ds {
			ds[i].Reply = Redact(ds[i].Reply)
		}
		st.Refusals = ds
	}
	if st.Store != nil {
		c := *st.Store
		c.Backend = Redact(c.Backend)
		st.Store = &c
	}
}

// userinfo matches the user:password@ part of a URL or of a
// user:password@host address.
var userinfo = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://)?[^\s/@:]*:[^\s/@]*@`)

// Redact replaces credentials in URLs ("redis://user:secret@host") with
// "***", for free text shown on the page.
func Redact(s string) string {
	if !bytes.ContainsRune([]byte(s), '@') {
		return s
	}
	return userinfo.ReplaceAllString(s, "${1}***@")
}

// current returns the newest frame, sampling first if none exists (the
// server was not started with Serve).
func (s *Server) current() *frame {
	f := s.cur.Load()
	if f.st == nil {
		s.sample()
		f = s.cur.Load()
	}
	return f
}

// render encodes a frame's status with the history samples later than
// after (Unix ms; 0 for all).
func (f *frame) render(after int64) ([]byte, error) {
	st := *f.st
	for i, smp := range f.hist {
		if smp.T > after {
			st.History = f.hist[i:]
			break
		}
	}
	return json.Marshal(&st)
}

// fresh returns a frame whose status was taken at most Options.Fresh
// ago: the newest sample's, or one taken now for this request (with the
// newest sample's history). One status is taken at a time; requests that
// wait for it share it, so viewers cost the daemon at most one status per
// Options.Fresh, however many they are.
func (s *Server) fresh() *frame {
	f := s.current()
	if s.o.Clock.Now().Sub(f.at) < s.o.Fresh {
		return f
	}
	s.freshMu.Lock()
	defer s.freshMu.Unlock()
	if ff := s.freshest; ff != nil && s.o.Clock.Now().Sub(ff.at) < s.o.Fresh {
		if f = s.cur.Load(); f.at.After(ff.at) {
			return f
		}
		return &frame{seq: ff.seq, st: ff.st, at: ff.at, hist: s.cur.Load().hist}
	}
	st := s.o.Source.Status()
	now := s.o.Clock.Now()
	s.mu.Lock()
	s.clean(&st, now)
	s.mu.Unlock()
	f = s.cur.Load()
	s.freshest = &frame{seq: f.seq, st: &st, at: now, hist: f.hist}
	return s.freshest
}

// serveJSON answers /status.json with a fresh status (see fresh), so
// `sluice status` shows the decisions made just before it asked.
func (s *Server) serveJSON(w http.ResponseWriter, r *http.Request) {
	b, err := s.fresh().render(0)
	if err != nil {
		s.log.Error("web: encoding status", "err", err)
		http.Error(w, "cannot encode status", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(append(b, '\n'))
}

// writeTimeout bounds each write to an event stream, so a viewer that
// stops reading is dropped.
const writeTimeout = 10 * time.Second

// serveEvents streams every new frame as a server-sent event "status"
// whose data is the status JSON, carrying only the history samples the
// viewer has not had yet. The stream ends when the viewer leaves, after
// StreamMaxAge, or when the server shuts down.
func (s *Server) serveEvents(w http.ResponseWriter, r *http.Request) {
	if n := s.streams.Add(1); n > int64(s.o.MaxStreams) {
		s.streams.Add(-1)
		w.Header().Set("Retry-After", "10")
		http.Error(w, errStreamsFull.Error(), http.StatusServiceUnavailable)
		return
	}
	defer s.streams.Add(-1)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	if r.Method == http.MethodHead {
		return
	}
	rc := http.NewResponseController(w)
	age := s.o.Clock.NewTimer(s.o.StreamMaxAge)
	defer age.Stop()
	f := s.current()
	var sent int64 // Unix ms of the last sample sent
	var buf bytes.Buffer
	buf.WriteString("retry: 2000\n\n")
	for {
		b, err := f.render(sent)
		if err != nil {
			s.log.Error("web: encoding status", "err", err)
			return
		}
		if n := len(f.hist); n > 0 {
			sent = f.hist[n-1].T
		}
		fmt.Fprintf(&buf, "id: %d\nevent: status\ndata: %s\n\n", f.seq, b)
		_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		if _, err := w.Write(buf.Bytes()); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		buf.Reset()
		select {
		case <-f.next:
			f = s.cur.Load()
		case <-r.Context().Done():
			return
		case <-s.ctx.Done():
			return
		case <-age.C():
			return
		}
	}
}

// Streams returns the number of open event streams.
func (s *Server) Streams() int { return int(s.streams.Load()) }
