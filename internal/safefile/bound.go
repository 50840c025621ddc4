//go:build linux

package safefile

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// ReadTimeout bounds one read of a file. A file at rest on a local disk is
// read in milliseconds; the bound is for a file system that stops
// answering (NFS, or a FUSE mount any local user can make), whose read
// would otherwise hold the agent's caller for ever.
const ReadTimeout = 5 * time.Second

// maxStuckReads bounds the reads of one file system that are still
// waiting after ReadTimeout (each holds a thread and a descriptor until
// the file system answers): past it, reads of that file system fail at
// once.
const maxStuckReads = 4

// stuck counts, by device, the reads that passed ReadTimeout and have not
// returned yet.
var stuck = struct {
	sync.Mutex
	reads map[uint64]int
}{reads: map[uint64]int{}}

// readTimeout is ReadTimeout; the tests' stand-in for a hung file system
// shortens it.
var readTimeout = ReadTimeout

// readBounded reads f (on device dev) whole, within limit bytes and
// ReadTimeout, and closes it. A read past the bound goes on in the
// background until the file system answers, then closes f.
func readBounded(f *os.File, dev uint64, limit int64) ([]byte, error) {
	stuck.Lock()
	n := stuck.reads[dev]
	stuck.Unlock()
	if n >= maxStuckReads {
		f.Close()
		return nil, fmt.Errorf("%s: %d earlier reads of its file system have not returned: not read", f.Name(), n)
	}
	type result struct {
		data []byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		data, err := io.ReadAll(io.LimitReader(f, limit+1))
		f.Close()
		done <- result{data, err}
	}()
	timer := time.NewTimer(readTimeout)
	defer timer.Stop()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, r.err
		}
		if int64(len(r.data)) > limit {
			return nil, fmt.Errorf("%s grew past %d bytes while it was read", f.Name(), limit)
		}
		return r.data, nil
	case <-timer.C:
		stuck.Lock()
		stuck.reads[dev]++
		stuck.Unlock()
		go func() {
			<-done
			stuck.Lock()
			stuck.reads[dev]--
			stuck.Unlock()
		}()
		return nil, fmt.Errorf("%s: not read within %s (its file system does not answer)", f.Name(), readTimeout)
	}
}
