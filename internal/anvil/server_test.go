package anvil

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sluice/internal/anvil/anviltest"
	"sluice/internal/netserve"
	"sluice/internal/testutil/wait"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder is a Handler that counts per ident and records calls.
type recorder struct {
	mu     sync.Mutex
	count  map[string]int64
	calls  []string
	closed int
}

func (r *recorder) NewSession(int) Session { return &recSession{r: r, held: map[string]bool{}} }

type recSession struct {
	r    *recorder
	held map[string]bool // idents connected and not yet disconnected
}

func (s *recSession) log(format string, args ...any) {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	s.r.calls = append(s.r.calls, fmt.Sprintf(format, args...))
}

func (s *recSession) Connect(_ context.Context, ident string) (int64, int64, error) {
	s.log("connect %s", ident)
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	s.r.count[ident]++
	s.held[ident] = true
	return s.r.count[ident], 7, nil
}
func (s *recSession) Disconnect(_ context.Context, ident string) error {
	s.log("disconnect %s", ident)
	delete(s.held, ident)
	return nil
}
func (s *recSession) Holding() bool { return len(s.held) > 0 }
func (s *recSession) Event(_ context.Context, req Request, ident string) (int64, error) {
	s.log("%s %s", req, ident)
	return 3, nil
}
func (s *recSession) NewTLSStatus(_ context.Context, ident string) (int64, error) {
	return 4, nil
}
func (s *recSession) Lookup(_ context.Context, ident string) (Counts, error) {
	return Counts{1, 2, 3, 4, 5, 6}, nil
}
func (s *recSession) Close() {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	s.r.closed++
}

func start(t *testing.T, o Options) (*Server, string, *recorder) {
	t.Helper()
	rec := &recorder{count: map[string]int64{}}
	o.Handler = rec
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	s := NewServer(o)
	path := filepath.Join(t.TempDir(), "anvil")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
		if err := <-done; err != netserve.ErrServerClosed {
			t.Errorf("Serve returned %v", err)
		}
	})
	return s, path, rec
}

// TestTranscript checks the exact bytes of every reply.
func TestTranscript(t *testing.T) {
	_, path, _ := start(t, Options{})
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	steps := []struct{ send, want string }{
		{"", "protocol=anvil_protocol\n\n"},
		{"request=connect\nident=smtp:192.0.2.1\n\n", "status=0\ncount=1\nrate=7\n\n"},
		{"request=message\nident=smtp:192.0.2.1\n\n", "status=0\nrate=3\n\n"},
		{"request=recipient\nident=smtp:192.0.2.1\n\n", "status=0\nrate=3\n\n"},
		{"request=newtls\nident=smtp:192.0.2.1\n\n", "status=0\nrate=3\n\n"},
		{"request=newtls_status\nident=smtp:192.0.2.1\n\n", "status=0\nrate=4\n\n"},
		{"request=auth\nident=smtp:192.0.2.1\n\n", "status=0\nrate=3\n\n"},
		{"request=lookup\nident=smtp:192.0.2.1\n\n", "status=0\ncount=1\nrate=2\nmail=3\nrcpt=4\nnewtls=5\nauth=6\n\n"},
		{"request=bogus\nident=smtp:192.0.2.1\n\n", "status=-1\n\n"},
		{"request=disconnect\nident=smtp:192.0.2.1\n\n", "status=0\n\n"},
	}
	for _, st := range steps {
		if st.send != "" {
			if _, err := io.WriteString(c, st.send); err != nil {
				t.Fatal(err)
			}
		}
		got := readReply(t, r)
		if got != st.want {
			t.Fatalf("after %q got %q, want %q", st.send, got, st.want)
		}
	}
}

func readReply(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	var b strings.Builder
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("read: %v (so far %q)", err, b.String())
		}
		b.WriteString(line)
		if line == "\n" {
			return b.String()
		}
	}
}

func TestNoAnnounce(t *testing.T) {
	_, path, _ := start(t, Options{NoAnnounce: true})
	cl, err := anviltest.Dial("unix", path, true)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if got, err := cl.Do("connect", "smtp:x"); err != nil || got["count"] != 1 {
		t.Fatalf("%v %v", got, err)
	}
}

// TestMalformedClosesOnlyThatStream: bad input closes that stream, with
// the session's Close called; other streams go on.
func TestMalformedClosesOnlyThatStream(t *testing.T) {
	_, path, rec := start(t, Options{MaxLine: 128})
	good, err := anviltest.Dial("unix", path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	for _, bad := range []string{
		"request=connect\nident=a\nextra=1\n\n",
		"\x00\xff\xfe garbage\n",
		"request=connect\nident=" + strings.Repeat("z", 500) + "\n\n",
	} {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, bad)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		// The server closes with input unread, so the client may see a
		// reset instead of EOF; either way no reply was sent.
		all, err := io.ReadAll(c)
		c.Close()
		if string(all) != Announcement || err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("%q: got %q %v, want only the announcement then the end", bad, all, err)
		}
	}
	if _, err := good.Do("connect", "smtp:192.0.2.9"); err != nil {
		t.Fatalf("good stream broken: %v", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, c := range rec.calls {
		if strings.Contains(c, "zzz") || strings.HasSuffix(c, " a") {
			t.Errorf("malformed request reached the handler: %q", c)
		}
	}
}

// TestStalledRequestTimesOut: a client that never ends its request is
// cut off after RequestTimeout, and its session is closed.
func TestStalledRequestTimesOut(t *testing.T) {
	_, path, rec := start(t, Options{ConnLimits: netserve.ConnLimits{RequestTimeout: 100 * time.Millisecond}})
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "request=connect\nident=")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	all, err := io.ReadAll(c)
	if err != nil || string(all) != Announcement {
		t.Fatalf("got %q %v", all, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		rec.mu.Lock()
		closed := rec.closed
		rec.mu.Unlock()
		if closed == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("session not closed")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestMaxConns(t *testing.T) {
	s, path, _ := start(t, Options{ConnLimits: netserve.ConnLimits{MaxConns: 2}})
	a, err := anviltest.Dial("unix", path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := anviltest.Dial("unix", path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	wait.For(t, func() bool { return s.Conns() == 2 }, "2 open connections")
	if _, err := anviltest.Dial("unix", path, false); err == nil {
		t.Fatal("third stream accepted over MaxConns")
	}
	if _, err := a.Do("connect", "smtp:x"); err != nil {
		t.Fatal(err)
	}
}

// TestShutdownClosesIdleStreams: Shutdown closes at once the streams
// that hold no session, serves those that hold one until smtpd says
// disconnect, then closes them too (the next daemon must not meet a
// session it never counted); Close is called on each session.
func TestShutdownClosesIdleStreams(t *testing.T) {
	rec := &recorder{count: map[string]int64{}}
	s := NewServer(Options{Handler: rec, Logger: slog.New(slog.DiscardHandler)})
	l, err := net.Listen("unix", filepath.Join(t.TempDir(), "a"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	var clients []*anviltest.Client
	for i := range 5 {
		cl, err := anviltest.Dial("unix", l.Addr().String(), false)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if _, err := cl.Do("connect", "smtp:192.0.2.1"); err != nil {
			t.Fatal(err)
		}
		if i < 3 { // the session ended: the stream holds nothing
			if _, err := cl.Do("disconnect", "smtp:192.0.2.1"); err != nil {
				t.Fatal(err)
			}
		}
		clients = append(clients, cl)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(ctx) }()
	wait.For(t, func() bool { return s.Conns() <= 2 }, "the shutdown to close the idle connections")
	if _, err := clients[0].Do("connect", "smtp:x"); err == nil {
		t.Fatal("a stream holding nothing is still served after Shutdown began")
	}
	// The two holding streams are still served, until their sessions end.
	for _, cl := range clients[3:] {
		if r, err := cl.Do("message", "smtp:192.0.2.1"); err != nil || r["rate"] != 3 {
			t.Fatalf("a holding stream during Shutdown: %v %v", r, err)
		}
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) while two streams hold sessions", err)
	default:
	}
	for _, cl := range clients[3:] {
		if _, err := cl.Do("disconnect", "smtp:192.0.2.1"); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-done; err != netserve.ErrServerClosed {
		t.Fatalf("Serve: %v", err)
	}
	if rec.closed != 5 {
		t.Fatalf("%d sessions closed, want 5", rec.closed)
	}
	if _, err := clients[4].Do("connect", "smtp:x"); err == nil {
		t.Fatal("stream still served after shutdown")
	}
}

// TestShutdownHeldUntilDeadline: a stream whose session never ends is
// closed when Shutdown's context ends.
func TestShutdownHeldUntilDeadline(t *testing.T) {
	rec := &recorder{count: map[string]int64{}}
	s := NewServer(Options{Handler: rec, Logger: slog.New(slog.DiscardHandler)})
	l, err := net.Listen("unix", filepath.Join(t.TempDir(), "a"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	cl, err := anviltest.Dial("unix", l.Addr().String(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.Do("connect", "smtp:192.0.2.1"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v, want the context's end", err)
	}
	<-done
	if _, err := cl.Do("message", "smtp:192.0.2.1"); err == nil {
		t.Fatal("stream still served after Shutdown's context ended")
	}
	if rec.closed != 1 {
		t.Fatalf("%d sessions closed, want 1", rec.closed)
	}
}
