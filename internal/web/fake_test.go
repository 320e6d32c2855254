package web

import (
	"fmt"
	"sync"
	"time"

	"sluice/internal/status"
)

// fakeSource is a daemon whose figures move on every call, so a test can
// tell live values from anything baked into the page.
type fakeSource struct {
	mu    sync.Mutex
	calls int
	base  time.Time
}

func newFakeSource() *fakeSource {
	return &fakeSource{base: time.Now().Truncate(time.Second)}
}

// Calls returns how often Status was called.
func (f *fakeSource) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func (f *fakeSource) Status() status.Status {
	f.mu.Lock()
	f.calls++
	n := f.calls
	f.mu.Unlock()
	now := f.base.Add(time.Duration(n) * time.Second)
	letters := []string{status.SlotBusy, status.SlotIdle, status.SlotBusy, status.SlotStopped, status.SlotIdle, status.SlotKilled, status.SlotBusy, status.SlotStopped}
	slots := make([]status.Slot, 12)
	for i := range slots {
		st := letters[(i+n)%len(letters)]
		sl := status.Slot{State: st, Since: now.Add(-time.Duration(3+i*7) * time.Second)}
		switch st {
		case status.SlotBusy:
			sl.PID, sl.Cmd, sl.Requests = 4100+i, "scan", 10+i
			sl.Tag = fmt.Sprintf("scan /var/spool/MIMEDefang/mdefang-Q%03d", i*17+n)
		case status.SlotIdle:
			sl.PID, sl.Cmd, sl.Requests = 4100+i, "relayok", 3+i
		case status.SlotKilled:
			sl.PID, sl.Requests, sl.Tag = 4100+i, 500, "Worker has processed 500 requests"
		}
		slots[i] = sl
	}
	return status.Status{
		Version: "v0.9.0-test",
		Now:     now,
		Started: f.base.Add(-26 * time.Hour),
		Reload:  status.Reload{Generation: 3, At: f.base.Add(-40 * time.Minute)},
		Store:   &status.Store{Backend: "redis", Keys: int64(12000 + n), MaxKeys: 100000, Healthy: true},
		Doors: []status.Door{
			{Name: "policy", Listen: []string{"127.0.0.1:10031"}, Conns: 7},
			{Name: "mux", Listen: []string{"unix:/var/spool/MIMEDefang/mimedefang-multiplexor.sock"}, Conns: 2},
			{Name: "redis", Listen: []string{"redis://sluice:hunter2@10.0.0.5:6379/0"}},
		},
		Pool: &status.Pool{Slots: slots, Queued: n % 3, QueueSize: 20, Msgs: int64(80000 + n*3), Activations: uint64(900 + n), BusyTimeout: 60},
		Classes: []status.Class{
			{Name: "localnet", Incoming: int64(2 + n%5), Total: int64(4 + n%5), IncomingCap: 50, TotalCap: 80},
			{Name: "relay-omega", Incoming: int64(100 + n), Total: int64(140 + n), IncomingCap: 400, TotalCap: 500},
			{Name: "bulk-senders", Incoming: 38, Total: 39, IncomingCap: 40, TotalCap: 40},
			{Name: "default", Incoming: int64(5 * n % 90), Total: int64(5*n%90 + 12)},
		},
		Talkers: []status.Talker{
			{Rule: "per-client", Key: "203.0.113.7", Count: int64(40 + n), Limit: 100, Period: "1m", Rate: float64(40+n) / 60},
			{Rule: "per-sender", Key: "newsletter@example.com", Count: 80, Limit: 120, Period: "1h", Rate: 80.0 / 3600},
			{Rule: "per-client", Key: "198.51.100.23", Count: 12, Limit: 100, Period: "1m", Rate: 0.2},
		},
		Refusals: []status.Refusal{
			{At: now.Add(-4 * time.Second), Door: "policy", Rule: "per-client", Key: "203.0.113.99", Count: 101, Limit: 100, Period: "1m", Algorithm: "smooth", Verdict: "DEFER", Reply: "4.7.1 Rate limit exceeded, try again later"},
			{At: now.Add(-95 * time.Second), Door: "anvil", Rule: "connections", Key: "smtp:192.0.2.44", Count: 21, Limit: 20, Algorithm: "concurrency", Verdict: "421", Reply: "4.7.0 Too many connections from redis://u:p4ss@leak"},
		},
		Totals: status.Totals{Decisions: uint64(1000 + 37*n + n*n%23), Refusals: uint64(10 + n + n%4)},
	}
}
