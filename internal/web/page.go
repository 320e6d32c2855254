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
	m := pageMeter{Fig: status.Count(n) + " / ∞"}
	if limit <= 0 {
		m.Class = "nocap"
		return m
	}
	m.Fig = status.Count(n) + " / " + status.Count(limit)
	switch {
	case n >= limit:
		m.Class = "full"
	case n*5 >= limit*4:
		m.Class = "hot"
	}
	return m
}

// facts are the header's facts, as app.js's renderFacts has them.
func facts(st *status.Status) []pageFact {
	var out []pageFact
	if st.Version != "" {
		out = append(out, pageFact{K: "version", V: st.Version})
	}
	if !st.Started.IsZero() {
		out = append(out, pageFact{K: "up", V: status.Duration(st.Now.Sub(st.Started))})
	}
	if r := st.Reload; r.Generation != 0 {
		t := "gen " + strconv.Itoa(r.Generation)
		if !r.At.IsZero() {
			t += ", " + status.Duration(st.Now.Sub(r.At)) + " ago"
		}
		out = append(out, pageFact{K: "config", V: t})
		if !r.LastFailed.IsZero() && (r.At.IsZero() || r.LastFailed.After(r.At)) {
			out = append(out, pageFact{K: "reload", V: "failed " + status.Duration(st.Now.Sub(r.LastFailed)) + " ago", Bad: true})
		}
	}
	if s := st.Store; s != nil {
		t := s.Backend + ", " + status.Count(s.Keys)
		if s.MaxKeys != 0 {
			t += " / " + status.Count(s.MaxKeys)
		}
		t += " keys"
		if !s.Healthy {
			t += " — failing"
		}
		out = append(out, pageFact{K: "store", V: t, Bad: !s.Healthy})
	}
	if m := st.MTA; m != nil {
		out = append(out, pageFact{K: "mta", V: status.MTAText(m)})
	}
	if e := st.Escalation; e != nil {
		out = append(out, pageFact{K: "escalation", V: status.EscalationText(e), Bad: e.Error != ""})
	}
	out = append(out, pageFact{K: "decisions", V: status.Count(int64(st.Totals.Decisions))},
		pageFact{K: "refused", V: status.Count(int64(st.Totals.Refusals))})
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
		d.Doors = append(d.Doors, pageDoor{Name: door.Name, Text: " " + strings.Join(door.Listen, ", ") + " · " + status.Count(int64(door.Conns)) + " conn"})
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
