package mux_test

import (
	"context"
	"io"
	"strings"
	"testing"

	"sluice/internal/mux"
)

// TestDrainAnswersWhatWasAccepted: Drain (an upgrade's old multiplexor)
// stops accepting but answers every connection accepted before it: a
// request in a worker (on a connection goroutine: "sleep" is no counted
// kind), and a connection whose line comes only after Drain began (on the
// owner). Drain returns once both are answered: Close after it cuts
// nothing.
func TestDrainAnswersWhatWasAccepted(t *testing.T) {
	fs := watchFront(t)
	dir := t.TempDir()
	p, _ := runPool(t, dir)
	sock, srv, closeSrv := serveMain(t, p, dir, 0)
	busy := dialTimed(t, sock)
	if _, err := io.WriteString(busy, "sleep 300\n"); err != nil {
		t.Fatal(err)
	}
	fs.wait(t, mux.FrontHandOff, 1)
	awaits := fs.count(mux.FrontAwait) // busy's line may have come after its accept
	quiet := dialTimed(t, sock)
	fs.wait(t, mux.FrontAwait, awaits+1)
	drained := make(chan error, 1)
	go func() { drained <- srv.Drain(context.Background()) }()
	if _, err := io.WriteString(quiet, "relayok 192.0.2.1 h 25 192.0.2.2 25 Q\n"); err != nil {
		t.Fatal(err)
	}
	if err := <-drained; err != nil {
		t.Errorf("Drain: %v", err)
	}
	closeSrv() // what an upgrade's old multiplexor does next: nothing is left to cut
	for _, c := range []struct {
		name, want string
		r          io.Reader
	}{{"the request in a worker", "slept 300\n", busy}, {"the connection whose line came later", "ok", quiet}} {
		b, err := io.ReadAll(c.r)
		if err != nil || !strings.HasPrefix(string(b), c.want) {
			t.Errorf("%s: %q (%v), want %q", c.name, b, err, c.want)
		}
	}
}
