package redis

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"go.uber.org/goleak"
)

// server is a private redis-server on a loopback port, with its own temp
// directory and no persistence.
type server struct {
	bin  string
	dir  string
	port int
	args []string
	cmd  *exec.Cmd
}

func (s *server) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// errNoRedis means redis-server is not installed.
var errNoRedis = errors.New("redis-server not found (Debian package redis-server; scripts/test.sh installs it as root)")

func redisServerBinary() (string, error) {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/bin/redis-server", "/usr/sbin/redis-server", "/usr/local/bin/redis-server"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errNoRedis
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startServer starts a redis-server in dir (a fresh port if port is 0).
func startServer(dir string, port int, extra ...string) (*server, error) {
	bin, err := redisServerBinary()
	if err != nil {
		return nil, err
	}
	s := &server{bin: bin, dir: dir, args: extra}
	for attempt := 0; ; attempt++ {
		s.port = port
		if port == 0 {
			if s.port, err = freePort(); err != nil {
				return nil, err
			}
		}
		if err = s.start(); err == nil || port != 0 || attempt == 4 {
			return s, err
		}
	}
}

func (s *server) start() error {
	args := append([]string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--dir", s.dir, "--save", "", "--appendonly", "no", "--daemonize", "no",
		"--logfile", filepath.Join(s.dir, "redis.log"),
	}, s.args...)
	s.cmd = exec.Command(s.bin, args...)
	if err := s.cmd.Start(); err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if pingRaw(s.addr()) == nil {
			return nil
		}
		if time.Now().After(deadline) {
			s.kill()
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			return fmt.Errorf("redis-server on port %d did not answer: %s", s.port, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pingRaw speaks just enough RESP to see the server answer.
func pingRaw(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING: %q", line)
	}
	return nil
}

func (s *server) signal(sig syscall.Signal) error { return s.cmd.Process.Signal(sig) }

func (s *server) kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGCONT)
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.cmd = nil
}

var shared *server
var sharedErr error

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-redis-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shared, sharedErr = startServer(dir, 0)
	code := m.Run()
	if shared != nil {
		shared.kill()
	}
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// needServer returns the shared server, or skips loudly when redis-server
// is not installed (any other failure to start it fails the test).
func needServer(tb testing.TB) *server {
	tb.Helper()
	if errors.Is(sharedErr, errNoRedis) {
		tb.Skipf("SKIP (loud): the Redis store tests cannot run here: %v", sharedErr)
	}
	if sharedErr != nil {
		tb.Fatalf("starting redis-server: %v", sharedErr)
	}
	return shared
}

// privateServer starts a server of the test's own, for tests that stop it.
func privateServer(t *testing.T, extra ...string) *server {
	t.Helper()
	needServer(t)
	s, err := startServer(t.TempDir(), 0, extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.kill)
	return s
}

var prefixSeq atomic.Int64

// newTestStore connects a Store to srv under a prefix of its own (unless
// o sets one) and closes it at the end of the test.
func newTestStore(tb testing.TB, srv *server, o Options) *Store {
	tb.Helper()
	o.Addrs = []string{srv.addr()}
	if o.KeyPrefix == "" {
		o.KeyPrefix = fmt.Sprintf("t%d:", prefixSeq.Add(1))
	}
	if o.Deadline == 0 {
		o.Deadline = 2 * time.Second // generous: CI machines are noisy
	}
	s, err := New(context.Background(), o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// admin is a plain client for inspecting and disturbing the server.
func admin(tb testing.TB, srv *server) rueidis.Client {
	tb.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.addr()}, ForceSingleClient: true, DisableCache: true})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}

// crash stops a store's background work and drops its connections
// without releasing anything, as a host that dies would.
func crash(s *Store) {
	s.once.Do(func() {
		s.cancel()
		<-s.done
		s.c.close()
	})
}
