// Package redistest runs private redis-server instances for tests: each on
// a loopback port of its own, in a directory of its own, without
// persistence, never a shared default instance.
package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Server is a private redis-server on a loopback port, with its own temp
// directory and no persistence.
type Server struct {
	bin  string
	dir  string
	port int
	args []string
	cmd  *exec.Cmd
	// conf is a Sentinel's configuration file (Sentinel rewrites it), or
	// "" for a plain server.
	conf string
	// exited is closed when the process has exited and been reaped.
	exited chan struct{}
}

// Addr is host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// ErrNoRedis means redis-server is not installed.
var ErrNoRedis = errors.New("redis-server not found (Debian package redis-server; scripts/test.sh installs it as root)")

// Binary returns the path of redis-server, or ErrNoRedis.
func Binary() (string, error) {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/bin/redis-server", "/usr/sbin/redis-server", "/usr/local/bin/redis-server"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", ErrNoRedis
}

// FreePort returns a free loopback TCP port.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Start starts a redis-server in dir (a fresh port if port is 0).
func Start(dir string, port int, extra ...string) (*Server, error) {
	return start(&Server{dir: dir, args: extra}, port)
}

func start(s *Server, port int) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	s.bin = bin
	for attempt := 0; ; attempt++ {
		s.port = port
		if port == 0 {
			if s.port, err = FreePort(); err != nil {
				return nil, err
			}
		}
		if err = s.Restart(); err == nil || port != 0 || attempt == 4 {
			return s, err
		}
	}
}

// Restart starts the server again (after Kill), on the same port.
func (s *Server) Restart() error {
	args := []string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--dir", s.dir, "--save", "", "--appendonly", "no", "--daemonize", "no",
		"--logfile", filepath.Join(s.dir, "redis.log"),
	}
	if s.conf != "" {
		args = append([]string{s.conf, "--sentinel"}, args[:4]...)
		args = append(args, "--dir", s.dir, "--daemonize", "no", "--logfile", filepath.Join(s.dir, "redis.log"))
	}
	args = append(args, s.args...)
	s.cmd = exec.Command(s.bin, args...)
	if err := s.cmd.Start(); err != nil {
		return err
	}
	// The process is reaped by a goroutine of the server's own, which ends
	// when it exits; Kill waits for it.
	exited := make(chan struct{})
	s.exited = exited
	go func(cmd *exec.Cmd) {
		cmd.Wait()
		close(exited)
	}(s.cmd)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := Ping(s.Addr()); err == nil || errors.Is(err, ErrNoAuth) {
			return nil // up (one that requires a password says so)
		}
		select {
		case <-exited:
		default:
			if time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
				continue
			}
		}
		s.Kill()
		log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
		return fmt.Errorf("redis-server on port %d did not answer: %s", s.port, log)
	}
}

// ErrNoAuth is Ping's error for a server that requires a password.
var ErrNoAuth = errors.New("NOAUTH: the server requires a password")

// Ping speaks just enough RESP to see the server answer.
func Ping(addr string) error {
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
	if strings.HasPrefix(line, "-NOAUTH") {
		return ErrNoAuth
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING: %q", line)
	}
	return nil
}

// Signal sends sig to the server (SIGSTOP and SIGCONT simulate a hang).
func (s *Server) Signal(sig syscall.Signal) error { return s.cmd.Process.Signal(sig) }

// Kill stops the server at once and waits for it.
func (s *Server) Kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGCONT)
	s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}
