package metrics

import "github.com/prometheus/client_golang/prometheus"

// EscalationState is the escalation's figures at one moment (see
// internal/escalate): the addresses the kernel drops now and those
// counted, and the running totals of requests to the helper.
type EscalationState struct {
	Dropping, Tracked        int
	Added, Failed, QueueFull uint64
}

// escalation is a collector that reads the escalation's one record at
// each scrape.
type escalation struct {
	read             func() EscalationState
	addresses, total *prometheus.Desc
}

// Escalation registers sluice_mta_escalated_addresses{state} and
// sluice_mta_escalations_total{result}, read from read at each scrape.
// A nil Metrics does nothing.
func (m *Metrics) Escalation(read func() EscalationState) error {
	if m == nil {
		return nil
	}
	return m.reg.Register(&escalation{read: read,
		addresses: prometheus.NewDesc(Namespace+"_mta_escalated_addresses",
			"Addresses handed to the escalation helper: dropping (the kernel drops their connections now), tracked (their refused sessions counted).",
			[]string{"state"}, nil),
		total: prometheus.NewDesc(Namespace+"_mta_escalations_total",
			"Escalations since the start, by result: added (the helper added the address), failed (it did not: no helper, or its error), queue_full (dropped before reaching it).",
			[]string{"result"}, nil),
	})
}

// Describe implements prometheus.Collector.
func (e *escalation) Describe(ch chan<- *prometheus.Desc) {
	ch <- e.addresses
	ch <- e.total
}

// Collect implements prometheus.Collector.
func (e *escalation) Collect(ch chan<- prometheus.Metric) {
	s := e.read()
	ch <- prometheus.MustNewConstMetric(e.addresses, prometheus.GaugeValue, float64(s.Dropping), "dropping")
	ch <- prometheus.MustNewConstMetric(e.addresses, prometheus.GaugeValue, float64(s.Tracked), "tracked")
	ch <- prometheus.MustNewConstMetric(e.total, prometheus.CounterValue, float64(s.Added), "added")
	ch <- prometheus.MustNewConstMetric(e.total, prometheus.CounterValue, float64(s.Failed), "failed")
	ch <- prometheus.MustNewConstMetric(e.total, prometheus.CounterValue, float64(s.QueueFull), "queue_full")
}
