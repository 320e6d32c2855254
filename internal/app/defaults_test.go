package app

import (
	"testing"
	"time"

	"sluice/internal/anvil"
	"sluice/internal/config"
	"sluice/internal/milter"
	"sluice/internal/netserve"
	"sluice/internal/policy"
	"sluice/internal/rules"
	"sluice/internal/web"
)

// TestMilterDefaultsAgree: the configuration owns the milter's defaults,
// and the engine's zero-value defaults are the same numbers, so a server
// built without a configuration behaves as the daemon does.
func TestMilterDefaultsAgree(t *testing.T) {
	m := config.Default().Milter
	o := milterOptions(m)
	checks := []struct {
		name      string
		cfg, want any
	}{
		{"workers", o.Workers, milter.DefaultWorkers},
		{"queue", o.QueueLen, milter.DefaultQueueLen},
		{"idle_timeout", o.IdleTimeout, time.Duration(milter.DefaultIdleTimeout)},
		{"request_timeout", o.RequestTimeout, time.Duration(milter.DefaultRequestTimeout)},
		{"max_sessions", o.MaxSessions, milter.DefaultMaxSessions},
		{"max_packet", o.MaxData, milter.DefaultMaxData},
		{"queue_full", o.QueueFullResponse, milter.Response{}}, // the engine's default, Tempfail
		{"refuse_text", m.RefuseText, rules.DefaultMilterRefuse},
	}
	for _, c := range checks {
		if c.cfg != c.want {
			t.Errorf("milter.%s: the configuration's default is %v, the engine's %v", c.name, c.cfg, c.want)
		}
	}
}

// TestDoorDefaultsAgree: the configuration's defaults for the other
// doors are the engines' zero-value defaults too.
func TestDoorDefaultsAgree(t *testing.T) {
	c := config.Default()
	checks := []struct {
		name      string
		cfg, want any
	}{
		{"anvil.max_conns", c.Anvil.MaxConns, netserve.DefaultMaxConns},
		{"anvil.idle_timeout", c.Anvil.IdleTimeout.D(), time.Duration(netserve.DefaultIdleTimeout)},
		{"anvil.request_timeout", c.Anvil.RequestTimeout.D(), time.Duration(netserve.DefaultRequestTimeout)},
		{"anvil.max_line", c.Anvil.MaxLine, anvil.DefaultMaxLine},
		{"policy.max_conns", c.Policy.MaxConns, netserve.DefaultMaxConns},
		{"policy.idle_timeout", c.Policy.IdleTimeout.D(), time.Duration(netserve.DefaultIdleTimeout)},
		{"policy.request_timeout", c.Policy.RequestTimeout.D(), time.Duration(netserve.DefaultRequestTimeout)},
		{"policy.max_line", c.Policy.MaxLine, policy.DefaultMaxLine},
		{"policy.max_attrs", c.Policy.MaxAttrs, policy.DefaultMaxAttrs},
		{"policy.max_request", c.Policy.MaxRequest, policy.DefaultMaxRequest},
		{"throttle.max_conns", c.Throttle.MaxConns, netserve.DefaultMaxConns},
		{"throttle.request_timeout", c.Throttle.RequestTimeout.D(), time.Duration(netserve.DefaultRequestTimeout)},
		{"web.max_streams", c.Web.MaxStreams, web.DefaultMaxStreams},
		{"web.max_conns", c.Web.MaxConns, web.DefaultMaxConns},
		{"web.max_conns_per_peer", c.Web.MaxConnsPerPeer, web.DefaultMaxConnsPerPeer},
	}
	for _, c := range checks {
		if c.cfg != c.want {
			t.Errorf("%s: the configuration's default is %v, the engine's %v", c.name, c.cfg, c.want)
		}
	}
}

// TestMilterNoQueue: queue = 0 in the configuration means no queue, not
// the engine's default queue.
func TestMilterNoQueue(t *testing.T) {
	m := config.Default().Milter
	m.Queue = 0
	if o := milterOptions(m); o.QueueLen >= 0 {
		t.Errorf("queue = 0 gives the engine QueueLen %d, which it reads as its default; want negative (none)", o.QueueLen)
	}
	m.Queue = 5
	if o := milterOptions(m); o.QueueLen != 5 {
		t.Errorf("queue = 5 gives QueueLen %d", o.QueueLen)
	}
}
