package limiter

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
