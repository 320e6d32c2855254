package app

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sluice/internal/tally"
	"strings"
	"sync"
	"testing"
	"time"

	"sluice/internal/anvil/anviltest"
	"sluice/internal/status"
	"sluice/internal/throttle"
)

// syncBuffer is a log sink the daemon's goroutines write to at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// verdictTally counts verdicts by "door/verdict".
type verdictTally map[string]float64

func (t verdictTally) String() string {
	keys := make([]string, 0, len(t))
	for k, v := range t {
		if v != 0 {
			keys = append(keys, fmt.Sprintf("%s=%v", k, v))
		}
	}
	slices.Sort(keys)
	return strings.Join(keys, " ")
}

func (t verdictTally) equal(u verdictTally) bool { return t.String() == u.String() }

// logTally counts the decisions in a debug log: each is one debug line
// with door and verdict attributes (the refusal log's bounded INFO
// lines come on top of those).
func logTally(t *testing.T, log string) (verdictTally, map[string]int) {
	t.Helper()
	out, reasons := verdictTally{}, map[string]int{}
	for line := range strings.Lines(log) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		door, ok1 := rec["door"].(string)
		verdict, ok2 := rec["verdict"].(string)
		if rec["level"] != "DEBUG" || !ok1 || !ok2 || !slices.Contains(tally.VerdictWords[:], verdict) {
			continue
		}
		out[door+"/"+verdict]++
		if r, ok := rec["reason"].(string); ok {
			reasons[door+"/"+verdict+"/"+r]++
		}
	}
	return out, reasons
}

// metricTally sums sluice_decisions_total over rules.
func metricTally(s scrape) verdictTally {
	out := verdictTally{}
	for _, m := range s["sluice_decisions_total"].GetMetric() {
		var door, verdict string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "door":
				door = l.GetValue()
			case "verdict":
				verdict = l.GetValue()
			}
		}
		out[door+"/"+verdict] += m.GetCounter().GetValue()
	}
	return out
}

func statusTally(st status.Status) verdictTally {
	out := verdictTally{}
	for door, vs := range st.Totals.Doors {
		for v, n := range vs {
			out[door+"/"+v] += float64(n)
		}
	}
	return out
}

// agree waits until the log, /metrics and /status.json count the same
// verdicts, and returns them with the log's reasons.
func agree(t *testing.T, base string, logs *syncBuffer) (verdictTally, map[string]int, status.Status) {
	t.Helper()
	var lt verdictTally
	var reasons map[string]int
	var st status.Status
	eventually(t, "the log, /metrics and /status.json agreeing", func() (bool, string) {
		lt, reasons = logTally(t, logs.String())
		mt := metricTally(scrapeMetrics(t, base))
		st = getStatus(t, base)
		s := statusTally(st)
		return lt.equal(mt) && lt.equal(s), fmt.Sprintf("\nlog     %s\nmetrics %s\nstatus  %s", lt, mt, s)
	})
	var sum float64
	for _, n := range lt {
		sum += n
	}
	if uint64(sum) != st.Totals.Decisions {
		t.Errorf("the log has %v decisions, /status.json's total %d", sum, st.Totals.Decisions)
	}
	return lt, reasons, st
}

func recordConfig(dir, store string) string {
	return fmt.Sprintf(`state_dir = %q
%s
[[class]]
name = "loopback"
match = ["127.0.0.0/8"]
refuse = 1
[[class]]
name = "partners"
match = ["192.0.2.0/24"]
refuse = 1
[[class]]
name = "rest"
match = ["*"]
[anvil]
listen = ["unix:anvil"]
[policy]
listen = ["unix:policy"]
[[policy.rule]]
name = "warn"
count = "messages"
key = ["sender"]
limit = ["1/60s exact"]
dry_run = true
[[policy.rule]]
name = "r"
count = "messages"
key = ["sender"]
limit = ["2/60s exact"]
table = %q
action = "DEFER_IF_PERMIT 4.7.1 slow down, {key}"
[throttle]
listen = ["unix:throttle"]
[[throttle.policy]]
name = "banned"
match = ["ban.example"]
limit = "100/60s"
ban_signs = ["too many"]
corroborate = 1
cool_off = "10m"
[[throttle.policy]]
name = "held"
match = ["held.example"]
limit = "100/60s"
[[throttle.policy]]
name = "relays"
match = ["*"]
limit = "1/60s"
max_wait = "1s"
[milter]
listen = ["unix:milter"]
[web]
listen = ["inet:127.0.0.1:0"]
status_on_inet = true
`, dir, store, filepath.Join(dir, "r.table"))
}

// throttleAsk asks the throttle door for key's slot and returns the
// DEFER reason ("" for a grant), with the client, still open on a grant.
func throttleAsk(t *testing.T, sock, key string) (string, *throttle.Client) {
	t.Helper()
	tc, err := throttle.Dial("unix", sock, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := tc.Acquire(key)
	if err != nil {
		tc.Close()
		t.Fatalf("throttle %s: %v", key, err)
	}
	if rep.Defer != "" {
		tc.Close()
		return rep.Defer, nil
	}
	return "", tc
}

// driveDoors drives every door of the daemon in dir to each verdict it
// can give with the store answering.
func driveDoors(t *testing.T, d *Daemon, dir string) {
	t.Helper()
	// Policy: a flood sender (ok, dry_run, refused) and an exempt one.
	if verbs := drivePolicy(t, filepath.Join(dir, "policy"), "flood@example.org", 4); verbs["DEFER_IF_PERMIT"] != 2 {
		t.Fatalf("policy answers %v, want 2 DEFER_IF_PERMIT", verbs)
	}
	if verbs := drivePolicy(t, filepath.Join(dir, "policy"), "vip@example.org", 3); verbs["DEFER_IF_PERMIT"] != 0 {
		t.Fatalf("policy answers for the exempt sender %v, want none refused", verbs)
	}
	// Milter: the loopback class holds one session, the next is refused.
	msock := filepath.Join(dir, "milter")
	dialMilter(t, msock, "[127.0.0.1]", "127.0.0.1")
	if _, r := dialMilter(t, msock, "[127.0.0.2]", "127.0.0.2"); !strings.HasPrefix(replyText(r), "421") {
		t.Fatalf("second milter session: %s", replyText(r))
	}
	// Anvil: the partners class holds one connection, the next is over.
	for i := range 2 {
		cl, err := anviltest.Dial("unix", filepath.Join(dir, "anvil"), false)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		if _, err := cl.Do("connect", fmt.Sprintf("smtp:192.0.2.%d", i+1)); err != nil {
			t.Fatal(err)
		}
	}
	// Throttle: a grant, then a deferral (the next slot is beyond max_wait).
	tsock := filepath.Join(dir, "throttle")
	why, tc := throttleAsk(t, tsock, "mx.example.net")
	if why != "" {
		t.Fatalf("first throttle request deferred: %s", why)
	}
	tc.Done()
	tc.Close()
	if why, _ := throttleAsk(t, tsock, "mx.example.net"); !strings.Contains(why, "beyond the 1s maximum wait") {
		t.Fatalf("second throttle request: %q, want a max_wait deferral", why)
	}
	// A relay's ban: the send's answer matches the ban sign; the key's
	// next senders are deferred.
	why, tc = throttleAsk(t, tsock, "ban.example")
	if why != "" {
		t.Fatalf("ban.example deferred before its ban: %s", why)
	}
	if _, err := tc.Report([]throttle.ResultLine{{Kind: 'h', Text: "554 too many connections from you"}, {Kind: 'D', Text: "Giving up."}}, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	tc.Close()
	for range 3 {
		if why, _ := throttleAsk(t, tsock, "ban.example"); !strings.Contains(why, "the relay banned it") {
			t.Fatalf("ban.example after its ban: %q", why)
		}
	}
	// An administrator's suspension.
	if err := d.throttleBan.Suspend(context.Background(), "held held.example", time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if why, _ := throttleAsk(t, tsock, "held.example"); !strings.Contains(why, "suspended by an administrator") {
			t.Fatalf("held.example after its suspension: %q", why)
		}
	}
}

// TestOneRecordEveryDecision drives each door to each of its verdicts
// and finds the log, /metrics and /status.json counting the same
// decisions, and the status's recent refusals saying why.
func TestOneRecordEveryDecision(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "r.table"), []byte("vip@example.org exempt\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	path := writeConfig(t, dir, recordConfig(dir, ""))
	d := startDaemonLog(t, path, slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	base := webURL(t, d)
	driveDoors(t, d, dir)

	got, reasons, st := agree(t, base, logs)
	for _, want := range []string{
		"policy/ok", "policy/dry_run", "policy/refused", "milter/ok", "milter/refused",
		"anvil/ok", "anvil/refused", "throttle/ok", "throttle/deferred",
	} {
		if got[want] == 0 {
			t.Errorf("no %s decision counted: %s", want, got)
		}
	}
	for reason, n := range map[string]int{
		"throttle/deferred/max_wait": 1, "throttle/deferred/ban": 3, "throttle/deferred/suspended": 2,
		"policy/ok/exempt": 3, "policy/refused/limit": 2, "milter/refused/class": 1, "anvil/refused/class": 1,
	} {
		if reasons[reason] != n {
			t.Errorf("%d decisions %s in the log, want %d (all: %v)", reasons[reason], reason, n, reasons)
		}
	}
	if got["throttle/deferred"] != 6 {
		t.Errorf("throttle deferrals counted %v, want 6 (1 max_wait, 3 ban, 2 suspended)", got["throttle/deferred"])
	}
	seen := map[string]bool{}
	for _, r := range st.Refusals {
		seen[r.Door+"/"+r.Reason] = true
	}
	for _, want := range []string{"throttle/max_wait", "throttle/ban", "throttle/suspended", "policy/limit", "milter/class", "anvil/class"} {
		if !seen[want] {
			t.Errorf("/status.json's recent refusals lack %s: %+v", want, st.Refusals)
		}
	}
}

// TestOneRecordFailMode: with Redis down and fail_mode closed, each
// door's answer is a recorded decision, the same in the log, /metrics
// and /status.json.
func TestOneRecordFailMode(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "r.table"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	srv := startRedis(t)
	addr := srv.Addr()
	logs := &syncBuffer{}
	store := fmt.Sprintf("[store]\nkind = \"redis\"\n[store.redis]\naddrs = [%q]\nfail_mode = \"closed\"\ndeadline = \"200ms\"\n", addr)
	path := writeConfig(t, dir, recordConfig(dir, store))
	d := startDaemonLog(t, path, slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	base := webURL(t, d)
	srv.Kill() // Redis goes down: the fail mode answers

	c, err := net.Dial("unix", filepath.Join(dir, "policy"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if verb, err := policyAsk(c, bufio.NewReader(c), "s@example.org", "i1"); err != nil || verb != "DEFER_IF_PERMIT" {
		t.Fatalf("policy with Redis down: %q %v", verb, err)
	}
	if _, r := dialMilter(t, filepath.Join(dir, "milter"), "[127.0.0.1]", "127.0.0.1"); !strings.HasPrefix(replyText(r), "421 4.3.0") {
		t.Fatalf("milter with Redis down: %s", replyText(r))
	}
	if why, _ := throttleAsk(t, filepath.Join(dir, "throttle"), "mx.example.net"); why == "" {
		t.Fatal("throttle with Redis down granted a slot")
	}
	got, reasons, _ := agree(t, base, logs)
	for _, want := range []string{"policy/refused/fail_closed", "milter/refused/fail_closed", "throttle/deferred/fail_closed"} {
		if reasons[want] == 0 {
			t.Errorf("no %s decision in the log: %v (%s)", want, reasons, got)
		}
	}
}
