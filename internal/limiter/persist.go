package limiter

import "slices"

// AppendTimes appends the log's event times, oldest first, to buf (for a
// store that writes its state to disk).
func (l *EventLog) AppendTimes(buf []int64) []int64 {
	if l == nil {
		return buf
	}
	return append(buf, l.t[l.head:]...)
}

// NewEventLog returns a log holding times, which must be oldest first
// (for a store that reads its state back from disk). It keeps times.
func NewEventLog(times []int64) *EventLog {
	return &EventLog{t: times}
}

// InsertEvents adds n events at time t in their place among the log's
// (for a store replaying a journal of bookings) and returns the log, a new
// one if l is nil.
func InsertEvents(l *EventLog, t, n int64) *EventLog {
	if l == nil {
		l = &EventLog{}
	}
	i := len(l.t)
	for i > l.head && l.t[i-1] > t {
		i--
	}
	ins := make([]int64, n)
	for k := range ins {
		ins[k] = t
	}
	l.t = slices.Insert(l.t, i, ins...)
	return l
}

// Lend makes the log hold buf[head:], oldest first, using buf as its
// storage: the log's later changes may write into it or replace it (for a
// store that keeps logs in storage of its own and lends them to the
// algorithms; Storage gives the result back).
func (l *EventLog) Lend(buf []int64, head int) {
	l.t, l.head = buf, head
}

// Storage returns the log's storage and where its events begin in it:
// the events are buf[head:].
func (l *EventLog) Storage() (buf []int64, head int) {
	if l == nil {
		return nil, 0
	}
	return l.t, l.head
}
