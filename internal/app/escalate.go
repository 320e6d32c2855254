package app

import (
	"context"
	"log/slog"

	"sluice/internal/clock"
	"sluice/internal/config"
	"sluice/internal/escalate"
	"sluice/internal/governor"
	"sluice/internal/metrics"
	"sluice/internal/status"
	"sluice/internal/tally"
)

// escalateSettings are cfg's [mta.escalate] settings for the escalator:
// the classes with a reservation are never escalated.
func escalateSettings(cfg *config.Config) escalate.Settings {
	e := cfg.MTA.Escalate
	s := escalate.Settings{After: e.After, Within: e.Within.D(), For: e.For.D(), Spared: map[string]bool{}}
	for _, c := range cfg.Classes {
		if c.Reserve > 0 {
			s.Spared[c.Name] = true
		}
	}
	return s
}

// newEscalator returns the escalator of cfg, registered in m, or nil
// when [mta.escalate] has no socket.
func newEscalator(cfg *config.Config, m *metrics.Metrics, log *slog.Logger) (*escalate.Escalator, error) {
	sock := cfg.MTA.Escalate.Socket
	if sock == "" {
		return nil, nil
	}
	e := escalate.New(sock, escalateSettings(cfg), clock.Real{}, log)
	err := m.Escalation(func() metrics.EscalationState {
		s := e.State()
		return metrics.EscalationState{Dropping: s.Dropping, Tracked: s.Tracked, Added: s.Added, Failed: s.Failed, QueueFull: s.QueueFull}
	})
	return e, err
}

// escalationStatus is the escalation's state for the status page.
func (d *Daemon) escalationStatus() *status.Escalation {
	if d.escalator == nil {
		return nil
	}
	s := d.escalator.State()
	return &status.Escalation{Dropping: s.Dropping, Tracked: s.Tracked, Added: s.Added, Failed: s.Failed, QueueFull: s.QueueFull,
		Error: s.Error, Socket: d.escalator.Socket()}
}

// runEscalator sends the escalations to the helper until ctx ends.
func (d *Daemon) runEscalator(ctx context.Context) {
	if d.escalator == nil {
		return
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.escalator.Run(ctx)
	}()
}

// observers fans a verdict out to the tally and the escalator.
type observers struct {
	t *tally.Tally
	e *escalate.Escalator
}

// Observe implements governor.Observer.
func (o observers) Observe(v governor.Verdict) {
	o.t.Observe(v)
	o.e.Observe(v)
}
