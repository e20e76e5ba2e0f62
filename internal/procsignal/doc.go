// Package procsignal pauses (SIGSTOP) and resumes (SIGCONT) a child process of a
// test, such as a lab router's BGP daemon, to make it look busy or hung, and
// reads the /proc facts that identify a process.
//
// Guarantees (Linux; elsewhere Check and Pause fail, Resume does nothing, and
// the /proc readers report nothing):
//   - A Process signals only the process it was made for, and only while that
//     process still runs the program named at New: before every signal, Check
//     compares the start time and program name in /proc with those expected, and
//     the signal goes through the os.Process (a pidfd where the kernel has them),
//     so a reused PID is not signalled.
//   - Pause returns nil only once every thread of the process is stopped; when
//     that takes longer than its timeout it resumes the process and fails.
//     Resume returns nil only once no thread is stopped (or when there was
//     nothing to resume), giving up after its timeout.
//   - Resume of a Process that is not paused, or no longer runs, does nothing and
//     returns nil, so cleanups can always call it; pausing a paused Process fails
//     with ErrPaused.
//   - A Process is safe for concurrent use.
//
// Check and the signal are two steps; the pidfd, not Check, is what keeps a
// signal from reaching another process that took the PID in between.
package procsignal
