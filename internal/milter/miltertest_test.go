package milter

import (
	"context"
	"net"
	"os/exec"
	"path/filepath"
	"sluice/internal/testutil/peer"
	"strconv"
	"testing"
	"time"

	"sluice/internal/milter/wire"
)

// mtHandler is the simple handler the miltertest scripts drive: it
// refuses CONNECT from reject.example with 421, refuses a message whose
// Subject is "reject me" with a 550 reply, and otherwise makes every
// modification at EOM.
type mtHandler struct{ closes chan uint64 }

type mtMessage struct{ subject string }

func (h *mtHandler) Connect(s *Session, host string, _ Family, _ uint16, _ string) Response {
	if host == "reject.example" {
		return MustReply(421, "4.7.0", "class full")
	}
	return Continue
}
func (h *mtHandler) Helo(*Session, string) Response { return Continue }
func (h *mtHandler) MailFrom(s *Session, _ string, _ []string) Response {
	s.Data = &mtMessage{}
	return Continue
}
func (h *mtHandler) RcptTo(*Session, string, []string) Response { return Continue }
func (h *mtHandler) Header(s *Session, name, value string) Response {
	if msg, ok := s.Data.(*mtMessage); ok && name == "Subject" {
		msg.subject = value
	}
	return Continue
}
func (h *mtHandler) EOH(*Session) Response          { return Continue }
func (h *mtHandler) Body(*Session, []byte) Response { return Continue }
func (h *mtHandler) Abort(s *Session)               { s.Data = nil }
func (h *mtHandler) EOM(s *Session, m *Modifier) Response {
	msg, _ := s.Data.(*mtMessage)
	s.Data = nil
	if msg != nil && msg.subject == "reject me" {
		return MustReply(550, "5.7.1", "rejected by sluice")
	}
	qid, _ := s.Macro("i")
	j, _ := s.Macro("j")
	for _, err := range []error{
		m.AddHeader("X-Sluice", "checked qid="+qid+" j="+j),
		m.InsertHeader(0, "X-First", "1"),
		m.ChangeHeader(1, "Subject", "changed"),
		m.DeleteHeader(1, "X-Remove"),
		m.AddRecipient("<added@example.org>", ""),
		m.DeleteRecipient("<gone@example.org>"),
		m.ReplaceBody([]byte("new body\r\n")),
		m.Quarantine("held by sluice"),
	} {
		if err != nil {
			return Tempfail
		}
	}
	return Accept
}
func (h *mtHandler) Close(s *Session) { h.closes <- s.ID() }

// TestMiltertest runs OpenDKIM's miltertest (a libmilter-based MTA
// simulator, Debian package miltertest) against the engine, one Lua
// script of testdata/ per subtest.
func TestMiltertest(t *testing.T) {
	bin := peer.Binary(t, "miltertest", "miltertest")
	scripts := []struct {
		name     string
		protocol wire.Protocol
		sessions int
	}{
		{"negotiate", 0, 2},
		{"noreply", wire.ProtoNRHelo | wire.ProtoNRMail | wire.ProtoNRRcpt | wire.ProtoNRHeader | wire.ProtoNREOH | wire.ProtoNRBody, 1},
		{"message", 0, 1},
		{"idle", 0, 200},
	}
	for _, sc := range scripts {
		t.Run(sc.name, func(t *testing.T) {
			h := &mtHandler{closes: make(chan uint64, sc.sessions+1)}
			s := NewServer(Options{Handler: h, Logger: quiet(), Protocol: sc.protocol,
				Actions: wire.ActAddHeader | wire.ActChangeHeader | wire.ActAddRcpt | wire.ActDelRcpt |
					wire.ActChangeBody | wire.ActQuarantine})
			l, err := net.Listen("tcp", "127.0.0.1:0")
			must(t, err)
			served := make(chan error, 1)
			go func() { served <- s.Serve(l) }()
			port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "-D", "port="+port, "-s", filepath.Join("testdata", sc.name+".lua"))
			out, err := cmd.CombinedOutput()
			t.Logf("miltertest %s:\n%s", sc.name, out)
			if err != nil {
				t.Errorf("miltertest %s: %v", sc.name, err)
			}
			for range sc.sessions {
				select {
				case <-h.closes:
				case <-time.After(10 * time.Second):
					t.Fatalf("not every session was closed")
				}
			}
			must(t, s.Shutdown(context.Background()))
			if err := <-served; err != ErrServerClosed {
				t.Errorf("Serve: %v", err)
			}
			select {
			case id := <-h.closes:
				t.Errorf("session %d closed more than expected", id)
			default:
			}
		})
	}
}
