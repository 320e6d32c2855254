package policy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sluice/internal/netserve"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type echoHandler struct {
	mu     sync.Mutex
	closed int
}

func (h *echoHandler) NewSession() Session { return &echoSession{h: h} }

type echoSession struct {
	h *echoHandler
	n int
}

func (s *echoSession) Check(_ context.Context, r *Request) (string, error) {
	s.n++
	if r.Sender == "fail@x" {
		return "", errors.New("cannot decide")
	}
	if r.Sender == "" {
		return "DUNNO", nil
	}
	return "DEFER_IF_PERMIT " + r.ProtocolState + " " + r.Sender + " #" + itoa(int64(s.n)), nil
}

func (s *echoSession) Close() {
	s.h.mu.Lock()
	s.h.closed++
	s.h.mu.Unlock()
}

func startServer(t *testing.T, o Options) (string, *echoHandler) {
	t.Helper()
	h := &echoHandler{}
	o.Handler = h
	o.Logger = slog.New(slog.DiscardHandler)
	s := NewServer(o)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
		<-done
	})
	return l.Addr().String(), h
}

func readReply(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	var b strings.Builder
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		b.WriteString(line)
		if line == "\n" {
			return b.String()
		}
	}
}

// TestPersistentTranscript: several requests on one connection, each
// answered in order, exact bytes.
func TestPersistentTranscript(t *testing.T) {
	addr, _ := startServer(t, Options{})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	steps := []struct{ send, want string }{
		{"request=smtpd_access_policy\nprotocol_state=RCPT\nsender=a@x\n\n", "action=DEFER_IF_PERMIT RCPT a@x #1\n\n"},
		{"protocol_state=END-OF-MESSAGE\nsender=a@x\nrequest=smtpd_access_policy\nnew_attr=1\n\n", "action=DEFER_IF_PERMIT END-OF-MESSAGE a@x #2\n\n"},
		{"request=smtpd_access_policy\n\n", "action=DUNNO\n\n"},
	}
	for _, st := range steps {
		io.WriteString(c, st.send)
		if got := readReply(t, r); got != st.want {
			t.Fatalf("sent %q: got %q, want %q", st.send, got, st.want)
		}
	}
}

// TestBadInputClosesWithoutReply: a malformed request or a handler error
// gets no reply and the connection closes; others are served.
func TestBadInputClosesWithoutReply(t *testing.T) {
	addr, h := startServer(t, Options{Limits: Limits{MaxLine: 512}})
	good, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	gr := bufio.NewReader(good)
	for _, bad := range []string{
		"sender=a\n\n",
		"request=smtpd_access_policy\nno equals sign\n\n",
		"request=smtpd_access_policy\nsender=" + strings.Repeat("x", 2000) + "\n\n",
		"\x00\x01\x02\x03\n\n",
		"request=smtpd_access_policy\nsender=fail@x\n\n",
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, bad)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		all, err := io.ReadAll(c)
		c.Close()
		if len(all) != 0 || err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("%.30q: got %q %v, want nothing and a close", bad, all, err)
		}
	}
	io.WriteString(good, "request=smtpd_access_policy\nsender=ok@x\nprotocol_state=RCPT\n\n")
	if got := readReply(t, gr); got != "action=DEFER_IF_PERMIT RCPT ok@x #1\n\n" {
		t.Fatalf("good connection: %q", got)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		h.mu.Lock()
		closed := h.closed
		h.mu.Unlock()
		if closed >= 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d sessions closed", closed)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestNeverEndingRequest: a client that starts a request and stalls is
// cut off after the request timeout.
func TestNeverEndingRequest(t *testing.T) {
	addr, _ := startServer(t, Options{ConnLimits: netserve.ConnLimits{RequestTimeout: 100 * time.Millisecond}})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "request=smtpd_access_policy\nsender=a")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	if all, _ := io.ReadAll(c); len(all) != 0 {
		t.Fatalf("got %q", all)
	}
	if time.Since(start) > 4*time.Second {
		t.Fatal("stalled request not cut off")
	}
}
