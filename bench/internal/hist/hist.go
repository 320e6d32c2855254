// Package hist is the latency histogram the bench load generators share.
package hist

import (
	"math"
	"math/bits"
	"time"
)

// Hist is a fixed-size log-linear latency histogram in the spirit of
// HdrHistogram: values below 2*histSub nanoseconds are exact, larger values
// fall into one of histSub buckets per power of two, so every recorded value
// is known to within 1/histSub (under 1%). Recording never allocates.
type Hist struct {
	counts [histBuckets]uint64
	n      uint64
}

const (
	histSubBits = 7
	histSub     = 1 << histSubBits // buckets per power of two
	// Exact buckets [0, 2*histSub), then histSub buckets for each exponent
	// 1..64-histSubBits-1.
	histBuckets = 2*histSub + (64-histSubBits-1)*histSub
)

func histIndex(v uint64) int {
	if v < 2*histSub {
		return int(v)
	}
	e := bits.Len64(v) - (histSubBits + 1) // >= 1
	m := v >> uint(e)                      // in [histSub, 2*histSub)
	return 2*histSub + (e-1)*histSub + int(m-histSub)
}

// histUpper returns the largest value that maps to bucket i.
func histUpper(i int) uint64 {
	if i < 2*histSub {
		return uint64(i)
	}
	j := i - 2*histSub
	e := j/histSub + 1
	m := uint64(j%histSub + histSub)
	return (m+1)<<uint(e) - 1
}

// Record counts one latency; a negative one counts as zero.
func (h *Hist) Record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[histIndex(uint64(d))]++
	h.n++
}

// Merge adds o's counts to h's.
func (h *Hist) Merge(o *Hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// Quantile returns the value at quantile q (0 < q <= 1) as the highest value
// equivalent to the bucket holding the ceil(q*n)-th smallest sample; 0 if the
// histogram is empty.
func (h *Hist) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(histUpper(i))
		}
	}
	return time.Duration(math.MaxInt64)
}

// Count returns the number of values recorded.
func (h *Hist) Count() uint64 { return h.n }
