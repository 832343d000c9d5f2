package userns

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os/exec"
	"os/user"
	"strconv"
	"strings"

	"k8s.io/klog/v2"
)

// KubeletUser is the user whose subordinate IDs are the node's range of
// pod IDs, as the kubelet's.
const KubeletUser = "kubelet"

// KubeletMappings returns the node's range of pod IDs as the kubelet finds
// it (Options.Mappings' default): the subordinate IDs of the KubeletUser
// user (/etc/subuid and /etc/subgid, as getsubids reports them: one range,
// the same for users and groups) when that user exists and getsubids is
// installed; otherwise (no such user, no /etc/passwd, no getsubids) every
// ID from idsPerPod up to 2^32-1. A user that
// exists without an answer from getsubids, or with different user and
// group ranges, is an error (getsubids may ask a remote service, which
// may be down).
func KubeletMappings(ctx context.Context, idsPerPod uint32) (first, length uint32, err error) {
	return subIDSource{lookupUser: user.Lookup, lookPath: exec.LookPath, run: runOutput}.mappings(ctx, idsPerPod)
}

// subIDSource is how KubeletMappings finds the user and asks getsubids.
type subIDSource struct {
	lookupUser func(name string) (*user.User, error)
	lookPath   func(file string) (string, error)
	run        func(ctx context.Context, name string, args ...string) ([]byte, error)
}

func runOutput(ctx context.Context, name string, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, name, args...).Output()
}

func (s subIDSource) mappings(ctx context.Context, idsPerPod uint32) (uint32, uint32, error) {
	logger := klog.FromContext(ctx)
	defaultFirst := idsPerPod
	defaultLen := uint32((1 << 32) - uint64(defaultFirst))
	if _, err := s.lookupUser(KubeletUser); err != nil {
		// No /etc/passwd at all (a node agent in a minimal container
		// image) has no such user either.
		var unknown user.UnknownUserError
		if errors.As(err, &unknown) || errors.Is(err, fs.ErrNotExist) {
			logger.V(5).Info("User namespaces: user not found, using default mappings", "user", KubeletUser, "err", err)
			return defaultFirst, defaultLen, nil
		}
		return 0, 0, err
	}
	const tool = "getsubids"
	cmd, err := s.lookPath(tool)
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			logger.V(2).Info("User namespaces: executable not found, using default mappings", "executable", tool, "err", err)
			return defaultFirst, defaultLen, nil
		}
		return 0, 0, err
	}
	uids, err := s.run(ctx, cmd, KubeletUser)
	if err != nil {
		return 0, 0, fmt.Errorf("error retrieving additional uids for user %q: %w", KubeletUser, err)
	}
	gids, err := s.run(ctx, cmd, "-g", KubeletUser)
	if err != nil {
		return 0, 0, fmt.Errorf("error retrieving additional gids for user %q: %w", KubeletUser, err)
	}
	if string(uids) != string(gids) {
		return 0, 0, fmt.Errorf("mismatched subuids and subgids for user %q", KubeletUser)
	}
	logger.V(5).Info("User namespaces: user found, using mappings from getsubids", "user", KubeletUser)
	return parseGetSubIDs(string(uids))
}

// parseGetSubIDs parses getsubids' answer, one range on one line:
// "0: kubelet 65536 2147483648" (index, user, first ID, count).
func parseGetSubIDs(out string) (uint32, uint32, error) {
	lines := strings.Split(strings.Trim(out, "\n"), "\n")
	if len(lines) != 1 {
		return 0, 0, fmt.Errorf("error parsing line %q: it must contain only one line", out)
	}
	parts := strings.Fields(lines[0])
	if len(parts) != 4 {
		return 0, 0, fmt.Errorf("invalid line %q", out)
	}
	first, err := strconv.ParseUint(parts[2], 10, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("error parsing line %q: %w", out, err)
	}
	length, err := strconv.ParseUint(parts[3], 10, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("error parsing line %q: %w", out, err)
	}
	return uint32(first), uint32(length), nil
}
