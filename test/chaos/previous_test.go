package chaos

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// previousRelease is the commit of the release before this one. Processes in
// Options.Previous run its chaos test binary, so that a run shares the nodes
// between two releases as a rolling deploy does. At the next release, set it
// to the last commit that the release being replaced was cut from, and check
// that its child still reads this procConfig (see procConfig).
const previousRelease = "2b89600"

// prevBuild is the chaos test binary of previousRelease, built once per test
// run by the first Run that needs it; TestMain removes its directory.
var prevBuild struct {
	once    sync.Once
	dir     string        // temporary: the release's tree and its binary
	bin     string        // the binary, when built
	took    time.Duration // time to extract and build
	missing error         // git, the repository or the commit is not there
	err     error         // the build failed
}

// previousBinary returns the path of the chaos test binary of
// previousRelease, and builds it on its first call. When git, the repository
// or the commit is missing, it fails t under CI=true and skips it elsewhere;
// a failed build fails t.
func previousBinary(t *testing.T) string {
	t.Helper()
	b := &prevBuild
	b.once.Do(func() {
		start := time.Now()
		b.bin, b.missing, b.err = buildPrevious()
		b.took = time.Since(start)
		if b.bin != "" {
			t.Logf("chaos: built the chaos test binary of %s in %v", previousRelease, b.took.Round(100*time.Millisecond))
		}
	})
	switch {
	case b.err != nil:
		t.Fatalf("chaos: building the previous release %s: %v", previousRelease, b.err)
	case b.missing != nil && os.Getenv("CI") == "true":
		t.Fatalf("chaos: the previous release %s is not available (%v); CI=true, and in CI the mixed deployment must run, not skip", previousRelease, b.missing)
	case b.missing != nil:
		t.Skipf("chaos: the previous release %s is not available (%v); skipping (with CI=true this fails)", previousRelease, b.missing)
	}
	return b.bin
}

// buildPrevious extracts previousRelease from the repository around the
// working directory into a new temporary directory (prevBuild.dir) and builds
// its chaos test binary there, in test/chaos, with this module cache. It
// returns missing when git, the repository or the commit is not there, and
// err when the extraction or the build fails.
func buildPrevious() (bin string, missing, err error) {
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, bytes.TrimSpace(ee.Stderr))
		}
		return "", fmt.Errorf("git rev-parse --show-toplevel: %w", err), nil
	}
	top := strings.TrimSpace(string(out))
	if err := exec.Command("git", "-C", top, "cat-file", "-e", previousRelease+"^{commit}").Run(); err != nil {
		return "", fmt.Errorf("commit %s is not in the repository %s: %w", previousRelease, top, err), nil
	}
	dir, err := os.MkdirTemp("", "redquorum-previous-")
	if err != nil {
		return "", nil, err
	}
	prevBuild.dir = dir
	src := filepath.Join(dir, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		return "", nil, err
	}
	tarball := filepath.Join(dir, "src.tar")
	for _, args := range [][]string{
		{"git", "-C", top, "archive", "-o", tarball, previousRelease},
		{"tar", "-x", "-f", tarball, "-C", src},
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			return "", nil, fmt.Errorf("%s: %w\n%s", strings.Join(args, " "), err, out)
		}
	}
	bin = filepath.Join(dir, "previous.test")
	// Build from the package's directory: test/ is a module of its own in
	// later releases and part of the root module in earlier ones.
	build := exec.Command("go", "test", "-c", "-o", bin, ".")
	build.Dir = filepath.Join(src, "test", "chaos")
	build.Env = append(os.Environ(), "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		return "", nil, fmt.Errorf("go test -c in %s: %w\n%s", build.Dir, err, out)
	}
	return bin, nil, nil
}

// removePrevious removes the directory of the previous release's build, if
// any.
func removePrevious() {
	if prevBuild.dir != "" {
		os.RemoveAll(prevBuild.dir)
	}
}
