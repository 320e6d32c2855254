package cli

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/internal/sdlisten"
	"sluice/internal/testutil/peer"
)

// unitHost runs the shipped sluice.service as systemd would, with the
// socket units it names in Sockets=: it binds every ListenStream= once,
// with the unit's SocketUser=, SocketGroup=, SocketMode= and
// DirectoryMode=, and keeps the sockets open across stops and starts, as
// systemd keeps a socket unit's sockets while its service restarts. A
// start runs ExecStartPre=, then ExecStart= with the sockets passed
// (LISTEN_FDS, LISTEN_FDNAMES: the socket unit's name), both as the
// unit's User= and Group= with no capability (setpriv, as the unit's
// CapabilityBoundingSet= and NoNewPrivileges= have it). Paths and
// addresses of the units and the config are moved by moved, so that the
// test runs beside an installed sluice; the moved unit files are written
// to unitDir, where ExecStartPre='s check reads them.
type unitHost struct {
	t      *testing.T
	svc    unitFile
	moved  *strings.Replacer
	asUnit []string // setpriv and its arguments
	files  []*os.File
	names  []string
	proc   *relProc // the running ExecStart=, nil when stopped
	dir    string   // where the moved unit files are
}

func newUnitHost(t *testing.T, moved *strings.Replacer, unitDir string) *unitHost {
	t.Helper()
	peer.Root(t, "the unit's sockets are made by root for other users")
	setpriv := peer.Binary(t, "util-linux", "setpriv")
	svc := readUnit(t, "sluice.service")
	runUser, runGroup := svc.one(t, "User"), svc.one(t, "Group")
	h := &unitHost{t: t, svc: svc, moved: moved, dir: unitDir,
		asUnit: []string{setpriv, "--reuid=" + runUser, "--regid=" + runGroup, "--init-groups", "--bounding-set=-all", "--inh-caps=-all", "--no-new-privs"}}
	t.Cleanup(func() {
		for _, f := range h.files {
			f.Close()
		}
	})
	for _, name := range strings.Fields(svc.one(t, "Sockets")) {
		u := readUnit(t, name)
		if u.one(t, "Service") != "sluice.service" {
			t.Errorf("%s: Service=%s", name, u.one(t, "Service"))
		}
		text := moved.Replace(unitText(t, name))
		if err := os.MkdirAll(unitDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(unitDir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		ls, err := sdlisten.ParseSocketUnit([]byte(text))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, l := range ls {
			h.bind(name, u, l)
		}
	}
	return h
}

// uninstall is a socket unit never installed (or systemctl disable --now):
// its file gone, its sockets neither passed nor on disk. The directories
// its DirectoryMode= made stay, as systemd leaves them.
func (h *unitHost) uninstall(name string) {
	h.t.Helper()
	text, err := os.ReadFile(filepath.Join(h.dir, name))
	if err != nil {
		h.t.Fatal(err)
	}
	ls, err := sdlisten.ParseSocketUnit(text)
	if err != nil {
		h.t.Fatal(err)
	}
	for _, l := range ls {
		if a, ok := l.Addr.(*net.UnixAddr); ok {
			os.Remove(a.Name)
		}
	}
	for i := len(h.names) - 1; i >= 0; i-- {
		if h.names[i] == name {
			h.files[i].Close()
			h.files = append(h.files[:i], h.files[i+1:]...)
			h.names = append(h.names[:i], h.names[i+1:]...)
		}
	}
	if err := os.Remove(filepath.Join(h.dir, name)); err != nil {
		h.t.Fatal(err)
	}
}

// unitText is the text of a shipped unit file.
func unitText(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(unitPath(name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// bind makes one ListenStream= socket as systemd does.
func (h *unitHost) bind(unit string, u unitFile, l sdlisten.UnitListen) {
	t := h.t
	var f *os.File
	switch a := l.Addr.(type) {
	case *net.UnixAddr:
		dirMode := os.FileMode(0o755)
		if len(u["DirectoryMode"]) == 1 {
			m, _ := strconv.ParseUint(u.one(t, "DirectoryMode"), 8, 32)
			dirMode = os.FileMode(m)
		}
		if err := os.MkdirAll(filepath.Dir(a.Name), dirMode); err != nil {
			t.Fatal(err)
		}
		os.Remove(a.Name)
		ul, err := net.ListenUnix("unix", a)
		if err != nil {
			t.Fatal(err)
		}
		ul.SetUnlinkOnClose(false)
		if f, err = ul.File(); err != nil {
			t.Fatal(err)
		}
		ul.Close()
		mode, _ := strconv.ParseUint(u.one(t, "SocketMode"), 8, 32)
		chownNames(t, a.Name, u.one(t, "SocketUser"), u.one(t, "SocketGroup"))
		if err := os.Chmod(a.Name, os.FileMode(mode)); err != nil {
			t.Fatal(err)
		}
	case *net.TCPAddr:
		tl, err := net.ListenTCP("tcp", a)
		if err != nil {
			t.Fatal(err)
		}
		if f, err = tl.File(); err != nil {
			t.Fatal(err)
		}
		tl.Close()
	}
	h.files = append(h.files, f)
	h.names = append(h.names, unit)
}

// execLine is one Exec*= line of the service, moved, split into argv.
func (h *unitHost) execLine(key string) []string {
	return strings.Fields(h.moved.Replace(h.svc.one(h.t, key)))
}

// preStart runs ExecStartPre= and returns its output and error.
func (h *unitHost) preStart() ([]byte, error) {
	argv := append(append([]string{}, h.asUnit...), h.execLine("ExecStartPre")...)
	return exec.Command(argv[0], argv[1:]...).CombinedOutput()
}

// start runs ExecStartPre= (a failure fails the test, as it fails the
// start) and ExecStart= with the sockets, and waits until the daemon
// says it serves (the sockets themselves accept from the start: systemd
// made them).
func (h *unitHost) start() *relProc {
	h.t.Helper()
	if out, err := h.preStart(); err != nil {
		h.t.Fatalf("ExecStartPre: %v\n%s", err, out)
	}
	p := h.startMain()
	waitUntil(h.t, "the daemon serves", func() bool { return strings.Contains(p.stderr.String(), "sluice started") },
		func() string { return p.stderr.String() })
	return p
}

// startMain runs ExecStart= with the sockets and returns at once.
func (h *unitHost) startMain() *relProc {
	argv := append(append([]string{}, h.asUnit...), h.execLine("ExecStart")...)
	h.proc = startProc(h.t, argv[0], argv[1:], h.files,
		"LISTEN_FDS="+strconv.Itoa(len(h.files)), "LISTEN_FDNAMES="+strings.Join(h.names, ":"))
	return h.proc
}

// stop is systemctl stop: SIGTERM to the main process (KillMode=mixed),
// then the wait up to TimeoutStopSec=; the sockets stay.
func (h *unitHost) stop() {
	h.t.Helper()
	if h.proc == nil {
		return
	}
	limit, err := time.ParseDuration(h.svc.one(h.t, "TimeoutStopSec"))
	if err != nil {
		h.t.Fatal(err)
	}
	_ = h.proc.cmd.Process.Signal(syscall.SIGTERM)
	t0 := time.Now()
	select {
	case <-h.proc.done:
		if d := time.Since(t0); d > 2*time.Second {
			h.t.Logf("the stop took %v:\n%s", d, h.proc.stderr.String())
		}
	case <-time.After(limit):
		h.t.Fatalf("sluice still runs %v after SIGTERM:\n%s", limit, h.proc.stderr.String())
	}
	h.proc = nil
}

// reload is systemctl reload: each ExecReload= line in order, as the
// unit's User= with no capability, $MAINPID the running ExecStart=; a
// line that fails fails the reload, as systemd has it. It returns the
// first failure's output and error; with none, it waits until the daemon
// says it reloaded.
func (h *unitHost) reload() ([]byte, error) {
	h.t.Helper()
	if h.proc == nil {
		h.t.Fatal("reload of a stopped unit")
	}
	before := strings.Count(h.proc.stderr.String(), "configuration reloaded")
	for _, line := range h.svc["ExecReload"] {
		argv := strings.Fields(h.moved.Replace(strings.ReplaceAll(line, "$MAINPID", strconv.Itoa(h.proc.pid()))))
		argv = append(append([]string{}, h.asUnit...), argv...)
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			return out, err
		}
	}
	waitUntil(h.t, "the daemon reloads", func() bool { return strings.Count(h.proc.stderr.String(), "configuration reloaded") > before },
		func() string { return h.proc.stderr.String() })
	return nil, nil
}
