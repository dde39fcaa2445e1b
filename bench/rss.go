package bench

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// PeakRSS is this process's peak resident set size in bytes, VmHWM in
// /proc/self/status: the most memory the bench process held at once over
// its life. 0 where the OS does not tell (not Linux).
func PeakRSS() int64 {
	return procStatus("VmHWM:")
}

// procStatus reads one "Name: N kB" line of /proc/self/status in bytes.
func procStatus(key string) int64 { return procKB("/proc/self/status", key) }

// procKB reads the "Name: N kB" line of a /proc file whose name is key,
// in bytes; 0 where there is none.
func procKB(path, key string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fs := strings.Fields(sc.Text()); len(fs) >= 2 && fs[0] == key {
			kb, _ := strconv.ParseInt(fs[1], 10, 64)
			return kb * 1024
		}
	}
	return 0
}
