package postfixtest

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"
)

// procInfo describes one process found under /proc.
type procInfo struct {
	pid   int
	ppid  int
	state byte // 'R', 'S', 'Z', ... from /proc/<pid>/stat
	comm  string
}

func (p procInfo) String() string {
	return fmt.Sprintf("%d(%s,%c)", p.pid, p.comm, p.state)
}

// processes lists the processes that belong to the instance: those in the
// session master created (session id == master pid) and those whose
// environment names this instance's config directory (MAIL_CONFIG). Zombies
// are included only if withZombies is set.
func (i *Instance) processes(withZombies bool) ([]procInfo, error) {
	return findProcesses(i.pid, "MAIL_CONFIG="+i.confDir, withZombies)
}

func findProcesses(sid int, envEntry string, withZombies bool) ([]procInfo, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	self := os.Getpid()
	var out []procInfo
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		info, psid, err := readStat(pid)
		if err != nil {
			continue // gone meanwhile
		}
		if info.state == 'Z' && !withZombies {
			continue
		}
		match := sid > 0 && psid == sid
		if !match && envEntry != "" {
			match = environHas(pid, envEntry)
		}
		if match {
			out = append(out, info)
		}
	}
	return out, nil
}

// readStat parses /proc/<pid>/stat: "pid (comm) state ppid pgrp session ...".
func readStat(pid int) (procInfo, int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procInfo{}, 0, err
	}
	open := bytes.IndexByte(b, '(')
	closing := bytes.LastIndexByte(b, ')')
	if open < 0 || closing < open {
		return procInfo{}, 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	fields := strings.Fields(string(b[closing+1:]))
	if len(fields) < 4 || len(fields[0]) != 1 {
		return procInfo{}, 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	sid, err := strconv.Atoi(fields[3])
	if err != nil {
		return procInfo{}, 0, fmt.Errorf("malformed /proc/%d/stat: %w", pid, err)
	}
	ppid, err := strconv.Atoi(fields[1])
	if err != nil {
		return procInfo{}, 0, fmt.Errorf("malformed /proc/%d/stat: %w", pid, err)
	}
	return procInfo{pid: pid, ppid: ppid, state: fields[0][0], comm: string(b[open+1 : closing])}, sid, nil
}

// liveOnly returns the processes of ps that are not zombies.
func liveOnly(ps []procInfo) []procInfo {
	var live []procInfo
	for _, p := range ps {
		if p.state != 'Z' {
			live = append(live, p)
		}
	}
	return live
}

// reapOwn reaps the zombies in ps that are children of this process (other
// than skip, which os/exec reaps) and returns the processes that remain.
func reapOwn(ps []procInfo, skip int) []procInfo {
	self := os.Getpid()
	var rest []procInfo
	for _, p := range ps {
		if p.state == 'Z' && p.ppid == self && p.pid != skip {
			var ws syscall.WaitStatus
			if wpid, err := syscall.Wait4(p.pid, &ws, syscall.WNOHANG, nil); err == nil && wpid == p.pid {
				continue
			}
		}
		rest = append(rest, p)
	}
	return rest
}

// Linux prctl options (linux/prctl.h).
const (
	prSetChildSubreaper = 36
	prGetChildSubreaper = 37
)

// subreaper counts the Stop calls that need this process to be a child
// subreaper, so concurrent Stops share one setting.
var subreaper struct {
	mu     sync.Mutex
	users  int
	wasSet bool // the process was a subreaper before we touched it
	ok     bool // we managed to set it
}

// acquireSubreaper makes this process a child subreaper (PR_SET_CHILD_SUBREAPER)
// until the returned release is called: orphaned descendants are then
// re-parented to this process rather than to init. Failure is not fatal:
// Stop then waits for init to reap instead.
func acquireSubreaper() (release func()) {
	subreaper.mu.Lock()
	defer subreaper.mu.Unlock()
	if subreaper.users == 0 {
		var cur int32
		_, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prGetChildSubreaper, uintptr(unsafe.Pointer(&cur)), 0)
		subreaper.wasSet = errno == 0 && cur != 0
		subreaper.ok = subreaper.wasSet
		if !subreaper.wasSet {
			_, _, errno = syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
			subreaper.ok = errno == 0
		}
	}
	subreaper.users++
	return func() {
		subreaper.mu.Lock()
		defer subreaper.mu.Unlock()
		subreaper.users--
		if subreaper.users == 0 && subreaper.ok && !subreaper.wasSet {
			_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 0, 0)
		}
	}
}

func environHas(pid int, entry string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false
	}
	for kv := range bytes.SplitSeq(b, []byte{0}) {
		if string(kv) == entry {
			return true
		}
	}
	return false
}

// tcpListening reports whether some socket listens on 127.0.0.1:port or
// 0.0.0.0:port, according to /proc/net/tcp. It does not connect, so no
// smtpd session (and no anvil event) is caused.
func tcpListening(port int) (bool, error) {
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return false, fmt.Errorf("check smtp listener: %w", err)
	}
	defer f.Close()
	want := []string{
		fmt.Sprintf("0100007F:%04X", port),
		fmt.Sprintf("00000000:%04X", port),
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		// sl local_address rem_address st ...
		if len(fields) < 4 || fields[3] != "0A" { // 0A = TCP_LISTEN
			continue
		}
		for _, w := range want {
			if fields[1] == w {
				return true, nil
			}
		}
	}
	if err := sc.Err(); err != nil {
		return false, fmt.Errorf("read /proc/net/tcp: %w", err)
	}
	return false, nil
}
