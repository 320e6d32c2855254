package pool

import "time"

// Per-second buckets for 600 s and hourly buckets for 24 h, as the
// reference keeps them for its load commands.
const (
	histSecs  = 600
	histHours = 24
)

type bucket struct {
	sec                int64 // the second (or hour) the bucket holds; -1 empty
	count, busy        int
	ms                 int64
	activated, reaped  int
	firstSeen, lastSee int64 // hourly buckets: first and last sample second
}

type history struct {
	secs  [histSecs]bucket
	hours [histHours]bucket
}

func newHistory() *history {
	h := &history{}
	for i := range h.secs {
		h.secs[i].sec = -1
	}
	for i := range h.hours {
		h.hours[i].sec = -1
	}
	return h
}

func (h *history) add(now time.Time, f func(*bucket)) {
	sec := now.Unix()
	b := &h.secs[sec%histSecs]
	if b.sec != sec {
		*b = bucket{sec: sec}
	}
	f(b)
	hour := sec / 3600
	hb := &h.hours[hour%histHours]
	if hb.sec != hour {
		*hb = bucket{sec: hour, firstSeen: sec}
	}
	f(hb)
	hb.lastSee = sec
}

// Window is what a history holds for one time window.
type Window struct {
	Count     int   // commands finished
	BusySum   int   // sum of the busy-worker counts when each finished
	MsSum     int64 // sum of their durations in milliseconds
	Activated int   // workers started (scan history only)
	Reaped    int   // workers reaped (scan history only)
	Span      int64 // hourly windows: seconds from first to last sample
}

// AvgBusy is BusySum/Count, or ifNone when Count is 0.
func (w Window) AvgBusy(ifNone float64) float64 {
	if w.Count == 0 {
		return ifNone
	}
	return float64(w.BusySum) / float64(w.Count)
}

// AvgMs is MsSum/Count, or 0 when Count is 0.
func (w Window) AvgMs() float64 {
	if w.Count == 0 {
		return 0
	}
	return float64(w.MsSum) / float64(w.Count)
}

// covers reports whether bucket b holds a time unit in (now-back, now].
func (b *bucket) covers(now, back int64) bool {
	return b.sec >= 0 && b.sec > now-back && b.sec <= now
}

// addCommands adds b's finished commands to w.
func (w *Window) addCommands(b *bucket) {
	w.Count += b.count
	w.BusySum += b.busy
	w.MsSum += b.ms
}

// window sums the last back seconds.
func (h *history) window(now time.Time, back int64) Window {
	var w Window
	for i := range h.secs {
		if b := &h.secs[i]; b.covers(now.Unix(), back) {
			w.addCommands(b)
			w.Activated += b.activated
			w.Reaped += b.reaped
		}
	}
	return w
}

// hourWindow sums the last hours hours; Span is the seconds from their
// first sample to their last.
func (h *history) hourWindow(now time.Time, hours int64) Window {
	var w Window
	var first, last int64 = -1, -1
	for i := range h.hours {
		if b := &h.hours[i]; b.covers(now.Unix()/3600, hours) {
			w.addCommands(b)
			if first < 0 || b.firstSeen < first {
				first = b.firstSeen
			}
			last = max(last, b.lastSee)
		}
	}
	if first >= 0 {
		w.Span = last - first
	}
	return w
}
