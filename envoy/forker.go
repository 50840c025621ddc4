//go:build linux

package envoy

import (
	"runtime"
	"sync"
)

// The forker is the one OS thread that forks every Envoy epoch and runs
// the agent's re-exec (ExecOnForkerThread).
//
// Envoy runs with a parent-death signal of SIGKILL, and Linux sends that
// signal when the *thread* that forked the child exits (golang/go#27505);
// execve of a multi-threaded process ends every thread but the caller. So
// all epochs come from one thread that never exits, and the exec runs on
// that same thread: it becomes the new process's main thread. In the new
// process the forker must be that main thread again (Envoys it adopted were
// forked by it), which is what ServeForkerOnMainThread does; a program that
// does not call it (a library user, a test binary) gets a dedicated locked
// thread instead, which is as good until that program execs.
var forker struct {
	once sync.Once
	jobs chan func()
}

// forkerJobs returns the forker's queue, starting a dedicated locked thread
// unless ServeForkerOnMainThread took the role first.
func forkerJobs() chan func() {
	forker.once.Do(func() {
		forker.jobs = make(chan func())
		go func() {
			// Never unlocked and never returns: the thread lives as long
			// as the process, so no child loses its parent thread.
			runtime.LockOSThread()
			for f := range forker.jobs {
				f()
			}
		}()
	})
	return forker.jobs
}

// onForkerThread runs f on the forker thread and waits for it.
func onForkerThread(f func()) {
	done := make(chan struct{})
	forkerJobs() <- func() {
		defer close(done)
		f()
	}
	<-done
}

// ServeForkerOnMainThread makes the calling goroutine the forker and runs
// program on another goroutine; it returns program's result. Call it from
// main, with the main goroutine locked to the main thread by
// runtime.LockOSThread in an init function: then the forker is the
// process's main thread, which Go never exits, before and after a re-exec.
// It panics if an epoch was forked before it was called.
func ServeForkerOnMainThread(program func() int) int {
	jobs := make(chan func())
	took := false
	forker.once.Do(func() {
		forker.jobs = jobs
		took = true
	})
	if !took {
		panic("envoy: ServeForkerOnMainThread called after the forker had started")
	}
	result := make(chan int, 1)
	go func() { result <- program() }()
	for {
		select {
		case f := <-jobs:
			f()
		case code := <-result:
			return code
		}
	}
}
