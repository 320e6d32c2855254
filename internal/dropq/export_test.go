package dropq

// Dropped is the number of values dropped because the queue was full.
func (q *Queue[T]) Dropped() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.dropped
}
