package bench

// ProcStatus is procStatus, for the memory benchmark.
var ProcStatus = procStatus
