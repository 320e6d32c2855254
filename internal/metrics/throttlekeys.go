package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ThrottleKey is one throttle key a relay's ban changed.
type ThrottleKey struct {
	Key            string    // the throttle key (policy and bucket)
	SuspendedUntil time.Time // zero: not suspended
	Bans           int64     // bans in a row
	Limit          int64     // the learned limit (0: the configured one)
}

// throttleKeys exports, at each scrape, the throttle keys its source
// lists (few keys, each with a state), so their series come and go with
// them:
//
//	sluice_throttle_key_suspended_seconds{key}  time left of the suspension
//	sluice_throttle_key_bans{key}               bans in a row
//	sluice_throttle_key_limit{key}              the learned limit
type throttleKeys struct {
	mu  sync.Mutex
	src func(context.Context) ([]ThrottleKey, error)
}

var (
	throttleSuspendedDesc = prometheus.NewDesc(Namespace+"_throttle_key_suspended_seconds",
		"Time left of a throttle key's suspension after the relay banned it.", []string{"key"}, nil)
	throttleBansDesc = prometheus.NewDesc(Namespace+"_throttle_key_bans",
		"Bans in a row of a throttle key (its cool-off doubles with each).", []string{"key"}, nil)
	throttleLimitDesc = prometheus.NewDesc(Namespace+"_throttle_key_limit",
		"The learned limit of a throttle key (sends per its policy's period), below the configured one.", []string{"key"}, nil)
)

// ThrottleKeys sets where the throttle keys' states come from at each
// scrape (the ban guard's marks); each scrape waits for it at most a
// second.
func (m *Metrics) ThrottleKeys(src func(context.Context) ([]ThrottleKey, error)) {
	if m == nil {
		return
	}
	m.throttleKeys.mu.Lock()
	defer m.throttleKeys.mu.Unlock()
	m.throttleKeys.src = src
}

// Describe implements prometheus.Collector.
func (c *throttleKeys) Describe(ch chan<- *prometheus.Desc) {
	ch <- throttleSuspendedDesc
	ch <- throttleBansDesc
	ch <- throttleLimitDesc
}

// Collect implements prometheus.Collector.
func (c *throttleKeys) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	src := c.src
	c.mu.Unlock()
	if src == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	keys, err := src(ctx)
	if err != nil {
		return
	}
	now := time.Now()
	for i, k := range keys {
		if i == MaxSeries {
			break
		}
		if left := k.SuspendedUntil.Sub(now); left > 0 {
			ch <- prometheus.MustNewConstMetric(throttleSuspendedDesc, prometheus.GaugeValue, left.Seconds(), k.Key)
		}
		if k.Bans > 0 {
			ch <- prometheus.MustNewConstMetric(throttleBansDesc, prometheus.GaugeValue, float64(k.Bans), k.Key)
		}
		if k.Limit > 0 {
			ch <- prometheus.MustNewConstMetric(throttleLimitDesc, prometheus.GaugeValue, float64(k.Limit), k.Key)
		}
	}
}
