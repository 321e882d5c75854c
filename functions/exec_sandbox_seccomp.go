package functions

import (
	"encoding/binary"
	"fmt"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The seccomp filter of every sandboxed handler (bwrap --seccomp). It narrows
// the kernel a handler can reach to what programs need: the calls below fail
// with EPERM (clone3 with ENOSYS, so that the C library falls back to clone,
// whose flags the filter can read), everything else is allowed. System calls of
// another architecture (32-bit calls from a 64-bit process, x32) are refused,
// so that the list cannot be sidestepped by their other numbers.
//
//   - new namespaces: unshare, setns, and clone with any CLONE_NEW* flag (no
//     nested user namespace, where a handler would be root and mount a tmpfs
//     past its memory limit);
//   - mounts: mount, umount2, pivot_root, the new mount API (fsopen, fsmount,
//     fsconfig, fspick, move_mount, open_tree, mount_setattr), chroot;
//   - other processes and the kernel: ptrace, process_vm_readv/writev,
//     kcmp, keyctl, add_key, request_key, bpf, userfaultfd, perf_event_open,
//     kexec_load, kexec_file_load, init_module, finit_module, delete_module,
//     open_by_handle_at, name_to_handle_at, lookup_dcookie, quotactl,
//     swapon, swapoff, reboot, acct, syslog, iopl, ioperm, settimeofday,
//     clock_settime, adjtimex, clock_adjtime, vhangup. (Not personality: programs
//     query their execution domain with it, and Docker's profile lets them.)

// seccompDenied are refused whatever their arguments.
var seccompDenied = []string{
	"unshare", "setns",
	"mount", "umount2", "pivot_root", "chroot",
	"fsopen", "fsmount", "fsconfig", "fspick", "move_mount", "open_tree", "mount_setattr",
	"ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
	"keyctl", "add_key", "request_key",
	"bpf", "userfaultfd", "perf_event_open",
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"open_by_handle_at", "name_to_handle_at", "lookup_dcookie", "quotactl",
	"swapon", "swapoff", "reboot", "acct", "syslog",
	"iopl", "ioperm", "settimeofday", "clock_settime", "adjtimex", "clock_adjtime",
	"vhangup",
}

// cloneNamespaceFlags are the flags of clone that make a namespace.
const cloneNamespaceFlags = unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWNET | unix.CLONE_NEWPID |
	unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME

// errnoENOSYS is returned for clone3, whose flags live in memory a filter cannot
// read: the C library and Go then use clone.
const errnoENOSYS = 38

// seccompProgram assembles the filter for this machine's architecture into the
// struct sock_filter array bwrap reads from its --seccomp descriptor.
func seccompProgram() ([]byte, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, fmt.Errorf("seccomp filter: %w", err)
	}
	policy := seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			{Action: seccomp.ActionErrno, Names: seccompDenied},
			{Action: seccomp.ActionErrno, NamesWithCondtions: []seccomp.NameWithConditions{{
				Name: "clone",
				Conditions: seccomp.ArgumentConditions{{
					Argument: 0, Operation: seccomp.BitsSet, Value: cloneNamespaceFlags,
				}},
			}}},
			{Action: seccomp.ActionErrno | errnoENOSYS, Names: []string{"clone3"}},
		},
	}
	body, err := policy.Assemble()
	if err != nil {
		return nil, fmt.Errorf("seccomp filter: %w", err)
	}
	// The library lets calls of another architecture through (its default
	// action): refuse them first.
	const archOffset = 4 // struct seccomp_data: nr, then arch
	prog := append([]bpf.Instruction{
		bpf.LoadAbsolute{Off: archOffset, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: uint32(seccomp.ActionErrno) | uint32(unix.EPERM)},
	}, body...)
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, fmt.Errorf("seccomp filter: %w", err)
	}
	out := make([]byte, 0, 8*len(raw))
	for _, ins := range raw {
		out = binary.NativeEndian.AppendUint16(out, ins.Op)
		out = append(out, ins.Jt, ins.Jf)
		out = binary.NativeEndian.AppendUint32(out, ins.K)
	}
	return out, nil
}
