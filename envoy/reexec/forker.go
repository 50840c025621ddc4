//go:build linux

// Package reexec is the agent's re-exec of itself, a live upgrade of the
// agent binary with its Envoys kept running: the one OS thread that forks
// every Envoy and runs the exec (the forker), the fds kept open across the
// exec (Inheritable), and the state the old agent hands the new one
// (HandoverState), which package envoy writes (Envoy.Handover) and reads
// back (AdoptEnvoy).
//
// It knows nothing of Envoy beyond that state's fields: package envoy forks
// its epochs through OnForkerThread, and the service serializes the state.
package reexec

import (
	"fmt"
	"runtime"
	"sync"
	"syscall"
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

// OnForkerThread runs f on the forker thread and waits for it. Package
// envoy starts every Envoy epoch in it, so that the epoch's parent-death
// signal fires only when the agent's process ends.
func OnForkerThread(f func()) {
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
		panic("reexec: ServeForkerOnMainThread called after the forker had started")
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

// ExecOnForkerThread replaces the agent with binary (execve), from the
// thread that forked every Envoy, so that their parent-death signal does
// not fire: that thread becomes the new program's main thread. It returns
// only when the exec failed.
func ExecOnForkerThread(binary string, argv, env []string) error {
	var err error
	OnForkerThread(func() { err = syscall.Exec(binary, argv, env) })
	return fmt.Errorf("exec %s: %w", binary, err)
}
