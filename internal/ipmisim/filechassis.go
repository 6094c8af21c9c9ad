package ipmisim

import (
	"fmt"
	"os"
	"path/filepath"
)

// FileChassis writes into dir a chassis control program for a BMC without a machine: it
// keeps what it is set to (power, boot device) in files in dir and appends every call,
// as ipmi_sim made it, to ChassisLog(dir). It returns the program's argv, for
// Config.ChassisCommand. Tests of what a BMC is told use it.
func FileChassis(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("error creating %s: %w", dir, err)
	}

	script := filepath.Join(dir, "file-chassis.sh")
	text := "#!/bin/sh\n" +
		"cd " + quote([]string{dir}) + " || exit 1\n" +
		`echo "$@" >> chassis.log
op=$1; shift
case $op in
get) for p in "$@"; do
	case $p in
	power) echo "power:$(cat power 2>/dev/null || echo 0)" ;;
	boot) echo "boot:$(cat boot 2>/dev/null || echo default)" ;;
	esac
done ;;
set) while [ $# -ge 2 ]; do
	case $1 in power) echo "$2" > power ;; boot) echo "$2" > boot ;; esac
	shift 2
done ;;
*) exit 1 ;;
esac
`

	if err := os.WriteFile(script, []byte(text), 0o755); err != nil {
		return nil, fmt.Errorf("error writing %s: %w", script, err)
	}

	return []string{"/bin/sh", script}, nil
}

// ChassisLog is where FileChassis(dir) logs its calls, one line each ("set boot pxe").
func ChassisLog(dir string) string { return filepath.Join(dir, "chassis.log") }

// FileChassisBoot is the file in which FileChassis(dir) keeps the boot device.
func FileChassisBoot(dir string) string { return filepath.Join(dir, "boot") }
