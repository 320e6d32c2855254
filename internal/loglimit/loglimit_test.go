package loglimit

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"sluice/internal/clock"
	"sluice/internal/testutil/logbuf"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestCeiling: 1,000 lines in one second under a ceiling of 10 write 10,
// then, when the next second's first line comes, one line saying 990 were
// suppressed; WithAttrs shares the budget; Close writes a pending notice.
func TestCeiling(t *testing.T) {
	var out logbuf.Buffer
	h := New(slog.NewTextHandler(&out, nil), 10)
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	h.s.clk = clk
	defer h.Close()
	log := slog.New(h)
	sub := log.With("door", "policy")
	for i := range 1000 {
		if i%2 == 0 {
			log.Info("flood", "i", i)
		} else {
			sub.Info("flood", "i", i)
		}
	}
	if n := len(out.Lines("")); n != 10 {
		t.Fatalf("%d lines in the first second, ceiling 10", n)
	}
	clk.Advance(time.Second)
	log.Info("next second")
	l := out.Lines("")
	if len(l) != 12 || !strings.Contains(l[10], "log: 990 lines suppressed") || !strings.Contains(l[10], "suppressed=990") || !strings.Contains(l[11], "next second") {
		t.Fatalf("after the flood:\n%s", strings.Join(l, "\n"))
	}
	for range 15 {
		log.Info("again")
	}
	h.Close()
	l = out.Lines("")
	if last := l[len(l)-1]; !strings.Contains(last, "log: 6 lines suppressed") {
		t.Fatalf("Close: %s", last)
	}
}

// TestNoticeWithoutFurtherLines: when the flood stops, the notice is
// written by itself within about a second.
func TestNoticeWithoutFurtherLines(t *testing.T) {
	var out logbuf.Buffer
	h := New(slog.NewTextHandler(&out, nil), 2)
	defer h.Close()
	log := slog.New(h)
	for range 5 {
		log.Info("x")
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(strings.Join(out.Lines(""), "\n"), "lines suppressed") {
		if time.Now().After(deadline) {
			t.Fatalf("no notice:\n%s", strings.Join(out.Lines(""), "\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestNoCeiling: 0 passes everything.
func TestNoCeiling(t *testing.T) {
	var out logbuf.Buffer
	h := New(slog.NewTextHandler(&out, nil), 0)
	defer h.Close()
	for range 500 {
		slog.New(h).Info("x")
	}
	if n := len(out.Lines("")); n != 500 {
		t.Fatalf("%d lines, want 500", n)
	}
}
