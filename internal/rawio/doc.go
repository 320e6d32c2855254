// Package rawio holds the raw system calls on bare non-blocking
// descriptors that sluice's own event loops make: internal/netserve's
// sessions and listeners, the mux's connections on the pool's owner
// (internal/mux) and the workers' pipes (internal/pool). A call through
// the syscall package's wrappers (syscall.Read, Accept4, Close) tells the
// scheduler a goroutine enters a possibly blocking call; when the runtime
// was idle (every P idle, the monitor thread asleep) that wakes the
// monitor thread, which then polls every 20 us until the runtime is idle
// again. A door between its peer's requests is idle, so that happened at
// every request. On a non-blocking descriptor these calls never block,
// so they are made with RawSyscall, which the scheduler does not see.
package rawio
