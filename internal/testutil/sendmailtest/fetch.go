package sendmailtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// packages are the Debian packages unpacked into the private root:
// sendmail-bin has the binary (and the helpfile), sendmail-cf the m4 macro
// tree that builds sendmail.cf, libwrap0 the one shared library the binary
// links that Postfix-only machines lack, and m4 the macro processor. None is
// installed: apt-get only downloads them and dpkg -x unpacks them.
var packages = []string{"sendmail-bin", "sendmail-cf", "libwrap0", "m4"}

// Paths inside the unpacked root.
const (
	rootSendmail = "usr/libexec/sendmail/sendmail"
	rootM4       = "usr/bin/m4"
	rootCFDir    = "usr/share/sendmail/cf"
	rootHelpFile = "etc/mail/helpfile"
	rootLibWrap  = "usr/lib/*/libwrap.so.0"
	stampName    = ".sluice-unpacked"
)

// Limits for fetching and unpacking.
const (
	fetchTimeout = 5 * time.Minute
	lockTimeout  = 6 * time.Minute
)

// tree is an unpacked private root.
type tree struct {
	root     string // <cache>/root
	sendmail string // the sendmail binary
	m4       string
	cfDir    string // the sendmail-cf macro tree, with a trailing slash
	helpFile string
	libDir   string // for LD_LIBRARY_PATH
	versions string // "pkg version" lines, from the stamp
}

// cacheDir returns where the unpacked packages are kept:
// $XDG_CACHE_HOME/sluice-test/sendmail if XDG_CACHE_HOME is set, else
// /var/cache/sluice-test/sendmail.
func cacheDir() string {
	if x := os.Getenv("XDG_CACHE_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "sluice-test", "sendmail")
	}
	return "/var/cache/sluice-test/sendmail"
}

// ensureTree returns the unpacked private root, downloading and unpacking
// the packages first if the cache does not hold a complete tree. A lock
// file serialises concurrent test processes (go test runs one binary per
// package, in parallel).
func ensureTree(logf func(string, ...any)) (*tree, error) {
	dir := cacheDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create cache dir: %w", err)
	}
	unlock, err := lockFile(filepath.Join(dir, ".lock"), lockTimeout)
	if err != nil {
		return nil, err
	}
	defer unlock()

	root := filepath.Join(dir, "root")
	if t, err := openTree(root); err == nil {
		return t, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		logf("sendmailtest: cached tree %s unusable (%v); fetching again", root, err)
	}
	if err := fetch(dir, root, logf); err != nil {
		return nil, err
	}
	return openTree(root)
}

// openTree checks a complete unpacked tree (its stamp is written last).
func openTree(root string) (*tree, error) {
	stamp, err := os.ReadFile(filepath.Join(root, stampName))
	if err != nil {
		return nil, err
	}
	t := &tree{
		root:     root,
		sendmail: filepath.Join(root, rootSendmail),
		m4:       filepath.Join(root, rootM4),
		cfDir:    filepath.Join(root, rootCFDir) + "/",
		helpFile: filepath.Join(root, rootHelpFile),
		versions: strings.TrimSpace(string(stamp)),
	}
	libs, _ := filepath.Glob(filepath.Join(root, rootLibWrap))
	if len(libs) != 1 {
		return nil, fmt.Errorf("%s: want one libwrap.so.0 under usr/lib/*/, found %d", root, len(libs))
	}
	t.libDir = filepath.Dir(libs[0])
	for _, p := range []string{t.sendmail, t.m4} {
		if err := checkExecutable(p); err != nil {
			return nil, err
		}
	}
	for _, p := range []string{filepath.Join(t.cfDir, "m4", "cf.m4"), t.helpFile} {
		if _, err := os.Stat(p); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// fetch downloads the packages with apt-get into a fresh directory under
// dir, unpacks them with dpkg -x, checks that the binary finds every shared
// library, and moves the tree to root.
func fetch(dir, root string, logf func(string, ...any)) error {
	for _, tool := range []string{"apt-get", "dpkg", "dpkg-deb", "ldd"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("fetch sendmail packages: %s not found (Debian tools needed): %w", tool, err)
		}
	}
	work, err := os.MkdirTemp(dir, "fetch-")
	if err != nil {
		return fmt.Errorf("fetch sendmail packages: %w", err)
	}
	defer os.RemoveAll(work)
	ctx, cancel := context.WithTimeout(context.Background(), fetchTimeout)
	defer cancel()

	t0 := time.Now()
	logf("sendmailtest: apt-get download %s into %s", strings.Join(packages, " "), work)
	// APT::Sandbox::User=root: apt's download sandbox user (_apt) cannot
	// write to a root-owned temp dir, and apt would warn about that.
	args := append([]string{"download", "-q", "-o", "APT::Sandbox::User=root"}, packages...)
	if out, err := run(ctx, work, "apt-get", args...); err != nil {
		return fmt.Errorf("apt-get download %s failed (no network, not root, or no package lists: try apt-get update): %w\n%s",
			strings.Join(packages, " "), err, tail(out, 20))
	}
	debs, err := filepath.Glob(filepath.Join(work, "*.deb"))
	if err != nil || len(debs) != len(packages) {
		return fmt.Errorf("apt-get download: want %d .deb files in %s, found %v (%v)", len(packages), work, debs, err)
	}
	unpacked := filepath.Join(work, "root")
	var versions []string
	for _, deb := range debs {
		if out, err := run(ctx, work, "dpkg", "-x", deb, unpacked); err != nil {
			return fmt.Errorf("dpkg -x %s: %w\n%s", filepath.Base(deb), err, tail(out, 20))
		}
		out, err := run(ctx, work, "dpkg-deb", "-f", deb, "Package", "Version")
		if err != nil {
			return fmt.Errorf("dpkg-deb -f %s: %w\n%s", filepath.Base(deb), err, tail(out, 20))
		}
		versions = append(versions, strings.Join(strings.Fields(strings.NewReplacer("Package:", "", "Version:", "").Replace(string(out))), " "))
	}
	// The package ships sendmail setgid smmsp/mail. The private copy is
	// only ever run by root, and a setgid binary would run in glibc's
	// secure mode, which ignores LD_LIBRARY_PATH (needed for the private
	// libwrap.so.0).
	bin := filepath.Join(unpacked, rootSendmail)
	if err := os.Chmod(bin, 0o755); err != nil {
		return fmt.Errorf("clear setgid bit of the private sendmail: %w", err)
	}
	libs, _ := filepath.Glob(filepath.Join(unpacked, rootLibWrap))
	if len(libs) != 1 {
		return fmt.Errorf("libwrap0 unpacked no usr/lib/*/libwrap.so.0 (found %v)", libs)
	}
	if err := checkLibraries(ctx, bin, filepath.Dir(libs[0])); err != nil {
		return err
	}
	stamp := strings.Join(versions, "\n") + "\n"
	if err := os.WriteFile(filepath.Join(unpacked, stampName), []byte(stamp), 0o644); err != nil {
		return fmt.Errorf("write stamp: %w", err)
	}
	if err := os.RemoveAll(root); err != nil {
		return fmt.Errorf("remove stale tree %s: %w", root, err)
	}
	if err := os.Rename(unpacked, root); err != nil {
		return fmt.Errorf("move unpacked tree to %s: %w", root, err)
	}
	logf("sendmailtest: unpacked %s into %s in %v", strings.ReplaceAll(strings.TrimSpace(stamp), "\n", ", "), root, time.Since(t0).Round(time.Millisecond))
	return nil
}

// checkLibraries runs ldd on bin with libDir on the library path and fails
// if any shared library is not found: that library must then be installed
// (apt-get install of a library package does not conflict with Postfix).
func checkLibraries(ctx context.Context, bin, libDir string) error {
	cmd := exec.CommandContext(ctx, "ldd", bin)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C", "LD_LIBRARY_PATH=" + libDir}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("ldd %s: %w\n%s", bin, err, tail(string(out), 20))
	}
	var missing []string
	for line := range strings.SplitSeq(string(out), "\n") {
		if strings.Contains(line, "not found") {
			missing = append(missing, strings.TrimSpace(line))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the private sendmail misses shared libraries (apt-get install the Debian packages that provide them): %s", strings.Join(missing, "; "))
	}
	return nil
}

// run runs a command in dir with a plain environment and returns its
// combined output.
func run(ctx context.Context, dir, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C", "DEBIAN_FRONTEND=noninteractive"}
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	return out.String(), err
}

// lockFile takes an exclusive flock on path, polling until timeout, and
// returns the function that releases it.
func lockFile(path string, timeout time.Duration) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	deadline := time.Now().Add(timeout)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				_ = f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			_ = f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if time.Now().After(deadline) {
			_ = f.Close()
			return nil, fmt.Errorf("lock %s: still held by another process after %v", path, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func checkExecutable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	return nil
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
