package main

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// panel is one chart of the plot: a figure of each run against its keys.
type panel struct {
	title string
	value func(row) float64
}

var panels = []panel{
	{"bytes per key (RSS; Redis: used_memory)", func(r row) float64 { return r.BytesPerKey }},
	{"policy decisions/s at c=64", func(r row) float64 { return r.RPS }},
	{"restore after a restart, s", func(r row) float64 { return r.RestoreSecs }},
}

// Plot geometry, in SVG user units.
const (
	panelW, panelH = 320.0, 260.0
	padL, padR     = 62.0, 24.0
	padT, padB     = 30.0, 40.0
	legendH        = 46.0
)

// series are the lines: one per store and algorithm, colour by store,
// dashes by algorithm.
type series struct{ store, algo string }

func (s series) colour() string {
	if s.store == "redis" {
		return "#c0392b"
	}
	return "#1f5fa8"
}

func (s series) dash() string {
	if s.algo == "smooth" {
		return ` stroke-dasharray="6 4"`
	}
	return ""
}

// plot draws the runs as an SVG: one panel per figure, the key count on a
// logarithmic x axis, a line per store and algorithm.
func plot(rows []row, rev string) []byte {
	var ss []series
	seen := map[series]bool{}
	minK, maxK := math.Inf(1), math.Inf(-1)
	for _, r := range rows {
		s := series{r.Store, r.Algo}
		if !seen[s] {
			seen[s] = true
			ss = append(ss, s)
		}
		minK, maxK = math.Min(minK, float64(r.Keys)), math.Max(maxK, float64(r.Keys))
	}
	if minK == maxK {
		minK, maxK = minK/10, maxK*10
	}
	w := panelW * float64(len(panels))
	h := panelH + legendH
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="sans-serif" font-size="11">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="%g" height="%g" fill="white"/>`+"\n", w, h)
	for i, p := range panels {
		drawPanel(&b, float64(i)*panelW, p, rows, ss, math.Log10(minK), math.Log10(maxK))
	}
	y := panelH + 16
	x := padL
	for _, s := range ss {
		fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="%s" stroke-width="2"%s/>`+"\n", x, y-4, x+28, y-4, s.colour(), s.dash())
		text(&b, x+34, y, "start", s.store+" "+s.algo)
		x += 150
	}
	text(&b, w-padR, panelH+38, "end", "bench/scale.sh, sluice "+strings.TrimSpace(rev))
	b.WriteString("</svg>\n")
	return b.Bytes()
}

func drawPanel(b *bytes.Buffer, x0 float64, p panel, rows []row, ss []series, lmin, lmax float64) {
	top := 0.0
	for _, r := range rows {
		top = math.Max(top, p.value(r))
	}
	step := niceStep(top / 4)
	top = math.Max(step*math.Ceil(top/step), step)
	pw, ph := panelW-padL-padR, panelH-padT-padB
	px := func(keys int) float64 {
		if lmax == lmin {
			return x0 + padL + pw/2
		}
		return x0 + padL + (math.Log10(float64(keys))-lmin)/(lmax-lmin)*pw
	}
	py := func(v float64) float64 { return padT + ph - v/top*ph }
	text(b, x0+padL+pw/2, 18, "middle", p.title)
	for v := 0.0; v <= top*1.0001; v += step {
		fmt.Fprintf(b, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#ddd"/>`+"\n", x0+padL, py(v), x0+padL+pw, py(v))
		text(b, x0+padL-4, py(v)+4, "end", short(v))
	}
	for e := math.Ceil(lmin); e <= lmax+1e-9; e++ {
		x := px(int(math.Round(math.Pow(10, e))))
		fmt.Fprintf(b, `<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#ddd"/>`+"\n", x, padT, x, padT+ph)
		text(b, x, padT+ph+14, "middle", "10^"+strconv.Itoa(int(e)))
	}
	text(b, x0+padL+pw/2, padT+ph+30, "middle", "keys")
	fmt.Fprintf(b, `<rect x="%g" y="%g" width="%g" height="%g" fill="none" stroke="#888"/>`+"\n", x0+padL, padT, pw, ph)
	for _, s := range ss {
		var pts []string
		for _, r := range rows {
			if r.Store == s.store && r.Algo == s.algo {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(r.Keys), py(p.value(r))))
			}
		}
		fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", strings.Join(pts, " "), s.colour(), s.dash())
		for _, pt := range pts {
			x, y, _ := strings.Cut(pt, ",")
			fmt.Fprintf(b, `<circle cx="%s" cy="%s" r="2.5" fill="%s"/>`+"\n", x, y, s.colour())
		}
	}
}

// text writes an escaped text element.
func text(b *bytes.Buffer, x, y float64, anchor, s string) {
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="%s">`, x, y, anchor)
	_ = xml.EscapeText(b, []byte(s))
	b.WriteString("</text>\n")
}

// niceStep rounds v up to 1, 2 or 5 times a power of ten (1 for v <= 0).
func niceStep(v float64) float64 {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// short prints an axis value: 1500 as 1.5k, 2000000 as 2M.
func short(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', 3, 64) + "M"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'g', 3, 64) + "k"
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}
