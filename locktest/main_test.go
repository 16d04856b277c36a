package locktest

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// TestMain leaves out the Examples, which need redis-server and cannot
// skip themselves, when redis-server is missing, unless CI is "true": in
// CI they must run, and fail. The tests skip or fail by themselves (Start).
func TestMain(m *testing.M) {
	flag.Parse()
	if _, err := exec.LookPath("redis-server"); err != nil && os.Getenv("CI") != "true" {
		fmt.Println("locktest: redis-server not found; the Examples do not run (with CI=true they fail)")
		_ = flag.Set("test.skip", "^Example")
	}
	os.Exit(m.Run())
}
