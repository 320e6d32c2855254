package web

// The status page's first paint: index.html is a template filled with the
// newest sample, so the facts, the classes and the doors are in the HTML
// itself (headless tools, screen readers and slow links see them before
// any script runs), and the whole status rides along in the body's
// data-initial attribute for app.js to draw the rest at once. The event
// stream then keeps it live. The markup is the one app.js builds, so its
// first update replaces like with like.

import (
	"bytes"
	"html/template"
	"net/http"
	"strconv"
	"strings"
	"time"

	"sluice/internal/status"
)

var pageTmpl = template.Must(template.New("index.html").Parse(string(assets["index.html"].body)))

// pageData is what index.html is filled with.
type pageData struct {
	Initial string // the status as JSON, for app.js
	Live    string // the live indicator's text before the stream answers
	Facts   []pageFact
	Classes []pageClass
	Doors   []pageDoor
	// PoolError is why the multiplexor's pool could not be read.
	PoolError string
}

type pageFact struct {
	K, V string
	Bad  bool
}

type pageClass struct {
	Name            string
	Incoming, Total pageMeter
}

// pageMeter is app.js's meter(): a bar (its width is set by app.js: the
// CSP allows no style attribute) and the figure against the cap.
type pageMeter struct {
	Class string // "", "hot", "full" or "nocap"
	Fig   string
}

type pageDoor struct {
	Name, Text string
}

func meterOf(n, limit int64) pageMeter {
	m := pageMeter{Fig: thousands(n) + " / ∞"}
	if limit <= 0 {
		m.Class = "nocap"
		return m
	}
	m.Fig = thousands(n) + " / " + thousands(limit)
	switch {
	case n >= limit:
		m.Class = "full"
	case n*5 >= limit*4:
		m.Class = "hot"
	}
	return m
}

// thousands formats n as app.js's num() does: 12,345.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// ago formats a duration as app.js's dur(): 4s, 3m12s, 2h05m, 3d4h.
func ago(d time.Duration) string {
	s := int64(max(0, d.Seconds()))
	switch {
	case s < 60:
		return strconv.FormatInt(s, 10) + "s"
	case s < 3600:
		out := strconv.FormatInt(s/60, 10) + "m"
		if s%60 != 0 {
			out += twoDigits(s%60) + "s"
		}
		return out
	case s < 86400:
		return strconv.FormatInt(s/3600, 10) + "h" + twoDigits(s/60%60) + "m"
	}
	return strconv.FormatInt(s/86400, 10) + "d" + strconv.FormatInt(s%86400/3600, 10) + "h"
}

func twoDigits(n int64) string {
	if n < 10 {
		return "0" + strconv.FormatInt(n, 10)
	}
	return strconv.FormatInt(n, 10)
}

// facts are the header's facts, as app.js's renderFacts has them.
func facts(st *status.Status) []pageFact {
	var out []pageFact
	if st.Version != "" {
		out = append(out, pageFact{K: "version", V: st.Version})
	}
	if !st.Started.IsZero() {
		out = append(out, pageFact{K: "up", V: ago(st.Now.Sub(st.Started))})
	}
	if r := st.Reload; r.Generation != 0 {
		t := "gen " + strconv.Itoa(r.Generation)
		if !r.At.IsZero() {
			t += ", " + ago(st.Now.Sub(r.At)) + " ago"
		}
		out = append(out, pageFact{K: "config", V: t})
		if !r.LastFailed.IsZero() && (r.At.IsZero() || r.LastFailed.After(r.At)) {
			out = append(out, pageFact{K: "reload", V: "failed " + ago(st.Now.Sub(r.LastFailed)) + " ago", Bad: true})
		}
	}
	if s := st.Store; s != nil {
		t := s.Backend + ", " + thousands(s.Keys)
		if s.MaxKeys != 0 {
			t += " / " + thousands(s.MaxKeys)
		}
		t += " keys"
		if !s.Healthy {
			t += " — failing"
		}
		out = append(out, pageFact{K: "store", V: t, Bad: !s.Healthy})
	}
	out = append(out, pageFact{K: "decisions", V: thousands(int64(st.Totals.Decisions))},
		pageFact{K: "refused", V: thousands(int64(st.Totals.Refusals))})
	return out
}

// servePage answers / with index.html filled with the newest sample.
func (s *Server) servePage(w http.ResponseWriter, r *http.Request) {
	f := s.current()
	b, err := f.render(0)
	if err != nil {
		s.log.Error("web: encoding status", "err", err)
		http.Error(w, "cannot encode status", http.StatusInternalServerError)
		return
	}
	st := f.st
	d := pageData{
		Initial:   string(b),
		Live:      "snapshot " + st.Now.UTC().Format("15:04:05") + " UTC · connecting…",
		Facts:     facts(st),
		PoolError: st.PoolError,
	}
	for _, c := range st.Classes {
		d.Classes = append(d.Classes, pageClass{Name: c.Name, Incoming: meterOf(c.Incoming, c.IncomingCap), Total: meterOf(c.Total, c.TotalCap)})
	}
	for _, door := range st.Doors {
		d.Doors = append(d.Doors, pageDoor{Name: door.Name, Text: " " + strings.Join(door.Listen, ", ") + " · " + thousands(int64(door.Conns)) + " conn"})
	}
	var buf bytes.Buffer
	if err := pageTmpl.Execute(&buf, &d); err != nil {
		s.log.Error("web: rendering the page", "err", err)
		http.Error(w, "cannot render the page", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(buf.Len()))
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(buf.Bytes())
}
