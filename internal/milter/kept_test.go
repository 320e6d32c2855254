package milter

import (
	"testing"
	"time"

	"sluice/internal/milter/wire"
)

// keptCheck reports, at Close, the errors of the session's two contexts.
type keptCheck struct{ errs chan [2]error }

func (*keptCheck) Connect(*Session, string, Family, uint16, string) Response { return Continue }
func (k *keptCheck) Close(s *Session) {
	k.errs <- [2]error{s.Context().Err(), s.KeptContext().Err()}
}

// TestKeptContextOutlivesClose: a session closed because the server is
// closing sees its Context cancelled, and its KeptContext (for releasing
// what it holds) not.
func TestKeptContextOutlivesClose(t *testing.T) {
	k := &keptCheck{errs: make(chan [2]error, 1)}
	srv, addr := start(t, Options{Handler: k})
	m := dial(t, addr)
	must(t, m.Negotiate(6, wire.AllActions, wire.AllProtocol))
	connect(t, m)
	srv.Close()
	select {
	case e := <-k.errs:
		if e[0] == nil {
			t.Error("Context not cancelled by Close")
		}
		if e[1] != nil {
			t.Errorf("KeptContext: %v, want it alive", e[1])
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the session was not closed")
	}
}
