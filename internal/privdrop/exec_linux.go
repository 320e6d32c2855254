package privdrop

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Exec replaces the process with exe (an open executable, typically
// OpenSelf's) run as a, with argv and env, keeping the descriptors in
// keep open across the exec. The new program starts with no privilege
// at all, on every thread, because it has only the one thread that gave
// them up:
//
//   - the capability bounding set emptied (no exec of a file with
//     capabilities can give any back),
//   - supplementary groups, group and user set to a's, real, effective
//     and saved,
//   - no_new_privs set (no set-user-ID or set-group-ID program it runs
//     gains anything).
//
// These calls act on the calling thread only (raw system calls, not
// glibc's process-wide wrappers): the exec that follows ends every other
// thread. Exec returns only on failure; the calling thread may then have
// given up what the others still hold, so the caller must exit.
func Exec(a Account, exe *os.File, argv, env []string, keep []*os.File) error {
	return execAs(a, exe, argv, env, keep, true)
}

// ExecAllowSetID is Exec without no_new_privs: the new program has no
// capability and can gain none (the bounding set is empty), but a
// set-group-ID program it runs still gains its group. The multiplexor's
// workers need that: MIMEDefang's notifications go through sendmail,
// which under Postfix hands the message to the set-group-ID postdrop (with
// no_new_privs, postdrop may not write the maildrop directory).
func ExecAllowSetID(a Account, exe *os.File, argv, env []string, keep []*os.File) error {
	return execAs(a, exe, argv, env, keep, false)
}

// execAs is Exec, with no_new_privs set or not.
func execAs(a Account, exe *os.File, argv, env []string, keep []*os.File, noNewPrivs bool) error {
	argvp, err := syscall.SlicePtrFromStrings(argv)
	if err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	envp, err := syscall.SlicePtrFromStrings(env)
	if err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	empty, _ := syscall.BytePtrFromString("")
	for _, f := range keep {
		if _, err := unix.FcntlInt(f.Fd(), unix.F_SETFD, 0); err != nil {
			return fmt.Errorf("keep descriptor %d across exec: %w", f.Fd(), err)
		}
	}
	last, err := lastCap()
	if err != nil {
		return err
	}
	runtime.LockOSThread() // for good: the thread is replaced or the process exits
	for c := 0; c <= last; c++ {
		if _, _, e := unix.RawSyscall6(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0, 0); e != 0 {
			return &StepError{Step: "prctl(PR_CAPBSET_DROP, " + strconv.Itoa(c) + ")", Err: e}
		}
	}
	groups := make([]uint32, len(a.Groups))
	for i, g := range a.Groups {
		groups[i] = uint32(g)
	}
	var gp unsafe.Pointer
	if len(groups) > 0 {
		gp = unsafe.Pointer(&groups[0])
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), uintptr(gp), 0); e != 0 {
		return &StepError{Step: "setgroups(" + a.Name + ")", Err: e}
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(a.GID), uintptr(a.GID), uintptr(a.GID)); e != 0 {
		return &StepError{Step: "setresgid(" + strconv.Itoa(a.GID) + ")", Err: e}
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(a.UID), uintptr(a.UID), uintptr(a.UID)); e != 0 {
		return &StepError{Step: "setresuid(" + strconv.Itoa(a.UID) + ")", Err: e}
	}
	// The user switch cleared the permitted, effective and ambient sets;
	// the inheritable set is cleared here, and the ambient set again, so
	// that no file-capability program run later inherits anything.
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var none [2]unix.CapUserData
	if _, _, e := unix.RawSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&none[0])), 0); e != 0 {
		return &StepError{Step: "capset(none)", Err: e}
	}
	if _, _, e := unix.RawSyscall6(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0, 0); e != 0 {
		return &StepError{Step: "prctl(PR_CAP_AMBIENT_CLEAR_ALL)", Err: e}
	}
	if noNewPrivs {
		if _, _, e := unix.RawSyscall6(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0, 0); e != 0 {
			return &StepError{Step: "prctl(PR_SET_NO_NEW_PRIVS)", Err: e}
		}
	}
	_, _, e := unix.RawSyscall6(unix.SYS_EXECVEAT, exe.Fd(), uintptr(unsafe.Pointer(empty)),
		uintptr(unsafe.Pointer(&argvp[0])), uintptr(unsafe.Pointer(&envp[0])), unix.AT_EMPTY_PATH, 0)
	return &StepError{Step: "execveat(" + exe.Name() + ")", Err: e}
}

// OpenSelf opens the running program's executable for Exec: a
// descriptor, so that the new user need not be able to reach it by path
// (a `go run` binary lives in a directory only its builder can search).
func OpenSelf() (*os.File, error) {
	f, err := os.Open("/proc/self/exe")
	if err != nil {
		return nil, fmt.Errorf("open the running executable: %w", err)
	}
	return f, nil
}

// lastCap is the highest capability number the kernel knows.
func lastCap() (int, error) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 0, fmt.Errorf("read the capability count: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 || n > 255 {
		return 0, fmt.Errorf("/proc/sys/kernel/cap_last_cap: %q is not a capability number", b)
	}
	return n, nil
}
