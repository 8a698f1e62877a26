package probe

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The small part of io_uring a probe needs, from include/uapi/linux/io_uring.h:
// io_uring_setup, the SQ and CQ rings mapped from the ring's descriptor,
// READ_FIXED of registered buffers (READ where registering is refused), and
// io_uring_enter to submit and wait.

const (
	ioringOffSQRing = 0
	ioringOffCQRing = 0x8000000
	ioringOffSQEs   = 0x10000000

	ioringFeatSingleMmap = 1 << 0
	ioringFeatExtArg     = 1 << 8

	ioringOpRead      = 22
	ioringOpReadFixed = 4

	ioringEnterGetEvents = 1 << 0
	ioringEnterExtArg    = 1 << 3

	ioringSetupCoopTaskrun  = 1 << 8  // Linux 5.19
	ioringSetupSingleIssuer = 1 << 12 // Linux 6.0
	ioringSetupDeferTaskrun = 1 << 13 // Linux 6.1

	ioringRegisterBuffers = 0
)

// uringParams is struct io_uring_params (120 bytes).
type uringParams struct {
	sqEntries    uint32
	cqEntries    uint32
	flags        uint32
	sqThreadCPU  uint32
	sqThreadIdle uint32
	features     uint32
	wqFD         uint32
	resv         [3]uint32
	sqOff        sqringOffsets
	cqOff        cqringOffsets
}

type sqringOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

type cqringOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

// uringSQE is struct io_uring_sqe (64 bytes).
type uringSQE struct {
	opcode      uint8
	flags       uint8
	ioprio      uint16
	fd          int32
	off         uint64
	addr        uint64
	len         uint32
	rwFlags     uint32
	userData    uint64
	bufIndex    uint16
	personality uint16
	spliceFDIn  int32
	addr3       uint64
	pad2        uint64
}

// uringCQE is struct io_uring_cqe (16 bytes).
type uringCQE struct {
	userData uint64
	res      int32
	flags    uint32
}

// ring is one io_uring instance. It is for one goroutine.
type ring struct {
	fd int

	sqMem, cqMem, sqeMem []byte

	sqHead, sqTail *uint32
	sqMask         uint32
	sqArray        []uint32
	sqes           []uringSQE

	cqHead, cqTail *uint32
	cqMask         uint32
	cqes           []uringCQE

	// fixed: the buffers are registered, reads are READ_FIXED.
	fixed bool
	// extArg: waits can time out (IORING_FEAT_EXT_ARG, Linux 5.11).
	extArg bool
	// The timeout of a wait, and the argument that points to it: in the
	// ring, on the heap, where they do not move (a goroutine's stack can,
	// and the kernel reads the timespec through a plain address).
	waitTS  unix.Timespec
	waitArg getEventsArg
}

// getEventsArg is struct io_uring_getevents_arg.
type getEventsArg struct {
	sigmask     uint64
	sigmaskSize uint32
	minWaitUsec uint32
	ts          uint64 // *struct __kernel_timespec
}

// setupFlags are tried in order until the kernel takes one (an older
// kernel refuses a flag it does not know with EINVAL). The first is what
// fio asks for: completions are posted when the ring's one thread waits for
// them (DEFER_TASKRUN, which needs SINGLE_ISSUER) instead of by
// interrupting it as each read completes (task work signalled to a running
// task), which costs CPU the probe and the device share. COOP_TASKRUN alone
// is the same without the batching, for 5.19 and 6.0.
var setupFlags = []uint32{ioringSetupCoopTaskrun | ioringSetupSingleIssuer | ioringSetupDeferTaskrun, ioringSetupCoopTaskrun, 0}

// newRing sets up a ring of entries slots. With DEFER_TASKRUN the ring
// belongs to the calling thread: the caller must be locked to its thread
// (runtime.LockOSThread) for the ring's life, and completions appear only
// during an enter that waits (enter with wait > 0).
func newRing(entries uint32) (*ring, error) {
	var p uringParams
	var fd uintptr
	var errno unix.Errno
	for _, f := range setupFlags {
		p = uringParams{flags: f}
		fd, _, errno = unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
		if errno != unix.EINVAL {
			break
		}
	}
	if errno != 0 {
		return nil, fmt.Errorf("io_uring_setup: %w", errno)
	}
	r := &ring{fd: int(fd), extArg: p.features&ioringFeatExtArg != 0}
	sqSize := int(p.sqOff.array + p.sqEntries*4)
	cqSize := int(p.cqOff.cqes + p.cqEntries*uint32(unsafe.Sizeof(uringCQE{})))
	single := p.features&ioringFeatSingleMmap != 0
	if single {
		sqSize = max(sqSize, cqSize)
	}
	var err error
	if r.sqMem, err = unix.Mmap(r.fd, ioringOffSQRing, sqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		r.close()
		return nil, fmt.Errorf("mmap the submission ring: %w", err)
	}
	r.cqMem = r.sqMem
	if !single {
		if r.cqMem, err = unix.Mmap(r.fd, ioringOffCQRing, cqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
			r.close()
			return nil, fmt.Errorf("mmap the completion ring: %w", err)
		}
	}
	sqeSize := int(p.sqEntries) * int(unsafe.Sizeof(uringSQE{}))
	if r.sqeMem, err = unix.Mmap(r.fd, ioringOffSQEs, sqeSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		r.close()
		return nil, fmt.Errorf("mmap the submission entries: %w", err)
	}
	r.sqHead = (*uint32)(unsafe.Pointer(&r.sqMem[p.sqOff.head]))
	r.sqTail = (*uint32)(unsafe.Pointer(&r.sqMem[p.sqOff.tail]))
	r.sqMask = *(*uint32)(unsafe.Pointer(&r.sqMem[p.sqOff.ringMask]))
	r.sqArray = unsafe.Slice((*uint32)(unsafe.Pointer(&r.sqMem[p.sqOff.array])), p.sqEntries)
	r.sqes = unsafe.Slice((*uringSQE)(unsafe.Pointer(&r.sqeMem[0])), p.sqEntries)
	r.cqHead = (*uint32)(unsafe.Pointer(&r.cqMem[p.cqOff.head]))
	r.cqTail = (*uint32)(unsafe.Pointer(&r.cqMem[p.cqOff.tail]))
	r.cqMask = *(*uint32)(unsafe.Pointer(&r.cqMem[p.cqOff.ringMask]))
	r.cqes = unsafe.Slice((*uringCQE)(unsafe.Pointer(&r.cqMem[p.cqOff.cqes])), p.cqEntries)
	// The SQ array maps ring slot i to entry i once and for all.
	for i := range r.sqArray {
		r.sqArray[i] = uint32(i)
	}
	return r, nil
}

// register registers bufs as fixed buffers: the kernel pins and maps them
// once instead of on every read, which saves CPU a read (BenchmarkIOUring,
// contrib/bench/README.md). A refusal (RLIMIT_MEMLOCK on older kernels)
// leaves plain reads.
func (r *ring) register(bufs [][]byte) {
	iov := make([]unix.Iovec, len(bufs))
	for i, b := range bufs {
		iov[i].Base = &b[0]
		iov[i].SetLen(len(b))
	}
	_, _, errno := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(r.fd), ioringRegisterBuffers,
		uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)), 0, 0)
	r.fixed = errno == 0
}

func (r *ring) close() {
	if r.sqeMem != nil {
		_ = unix.Munmap(r.sqeMem)
	}
	if r.cqMem != nil && (r.sqMem == nil || &r.cqMem[0] != &r.sqMem[0]) {
		_ = unix.Munmap(r.cqMem)
	}
	if r.sqMem != nil {
		_ = unix.Munmap(r.sqMem)
	}
	r.sqeMem, r.cqMem, r.sqMem = nil, nil, nil
	if r.fd >= 0 {
		unix.Close(r.fd)
		r.fd = -1
	}
}

// queueRead fills the next submission entry with a read of buf (registered
// buffer index idx) at off of fd; it is submitted by the next enter.
func (r *ring) queueRead(fd int, buf []byte, idx int, off int64, tag uint64) {
	tail := *r.sqTail // only this goroutine writes the tail
	e := &r.sqes[tail&r.sqMask]
	*e = uringSQE{fd: int32(fd), off: uint64(off), addr: uint64(uintptr(unsafe.Pointer(&buf[0]))), len: uint32(len(buf)), userData: tag}
	if r.fixed {
		e.opcode = ioringOpReadFixed
		e.bufIndex = uint16(idx)
	} else {
		e.opcode = ioringOpRead
	}
	atomic.StoreUint32(r.sqTail, tail+1) // release: the entry is visible before the tail
}

// errWaitTimedOut: enter's wait ended at its timeout with fewer
// completions than asked for.
var errWaitTimedOut = errors.New("io_uring wait timed out")

// enter submits the queued entries and waits until at least wait
// completions are there, or until timeout passes (when the kernel can time
// a wait out: Linux 5.11), then returning errWaitTimedOut.
func (r *ring) enter(wait uint32, timeout time.Duration) error {
	flags := uintptr(0)
	if wait > 0 {
		flags = ioringEnterGetEvents
	}
	useArg := wait > 0 && r.extArg
	if useArg {
		r.waitTS = unix.NsecToTimespec(int64(timeout))
		r.waitArg = getEventsArg{ts: uint64(uintptr(unsafe.Pointer(&r.waitTS)))}
		flags |= ioringEnterExtArg
	}
	for {
		// Entries a call interrupted before it took them are still in
		// the ring, after the kernel's head: submit what is there.
		n := *r.sqTail - atomic.LoadUint32(r.sqHead)
		var errno unix.Errno
		if useArg {
			_, _, errno = unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(n), uintptr(wait), flags,
				uintptr(unsafe.Pointer(&r.waitArg)), unsafe.Sizeof(r.waitArg))
		} else {
			_, _, errno = unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(n), uintptr(wait), flags, 0, 0)
		}
		switch errno {
		case 0:
			return nil
		case unix.EINTR:
			continue
		case unix.ETIME:
			return errWaitTimedOut
		}
		return fmt.Errorf("io_uring_enter: %w", errno)
	}
}

// reap calls fn for each completion there is, then frees their slots.
func (r *ring) reap(fn func(c uringCQE)) int {
	head := *r.cqHead
	tail := atomic.LoadUint32(r.cqTail) // acquire: entries up to tail are written
	n := 0
	for ; head != tail; head++ {
		fn(r.cqes[head&r.cqMask])
		n++
	}
	atomic.StoreUint32(r.cqHead, head)
	return n
}

// workerRuns sums how often this process's io_uring worker threads (named
// iou-wrk-PID) were scheduled: the third field of /proc/self/task/*/schedstat
// (run_delay's neighbour, pcount: times run on a CPU; kernel/sched/stats.h,
// proc_pid_schedstat in fs/proc/base.c). A read issued with REQ_NOWAIT that
// the block layer cannot take without blocking (no free tag, the scheduler's
// nr_requests used up, or a driver not nowait-capable) completes inside the
// kernel with -EAGAIN, and io_uring re-issues it from an io-wq worker
// (io_uring/rw.c io_read, io_uring/io_uring.c io_queue_async; the worker
// runs io_wq_submit_work). Such a worker (created in io_uring/io-wq.c
// create_io_thread, named "iou-wrk-%d") blocks in that read, so each
// hand-off is at least one run, and a count that grew over a measurement
// is the measure of its hand-offs: it is what the probe reports as io-wq
// hand-offs. Workers linger idle for a while after their last request
// (io-wq.c, WORKER_IDLE_TIMEOUT), so threads are not counted: their runs
// are. The count covers the whole process: callers measure one thing at a
// time. -1 when /proc does not tell (no schedstat).
func workerRuns() int64 {
	if _, err := os.Stat("/proc/self/schedstat"); err != nil {
		return -1 // a kernel without schedstats
	}
	entries, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return -1
	}
	var n int64
	for _, e := range entries {
		comm, err := os.ReadFile("/proc/self/task/" + e.Name() + "/comm")
		if err != nil {
			continue // the thread exited meanwhile
		}
		if !strings.HasPrefix(string(comm), "iou-wrk-") {
			continue
		}
		b, err := os.ReadFile("/proc/self/task/" + e.Name() + "/schedstat")
		if err != nil {
			continue // exited meanwhile
		}
		f := strings.Fields(string(b))
		if len(f) < 3 {
			return -1
		}
		runs, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			return -1
		}
		n += runs
	}
	return n
}
