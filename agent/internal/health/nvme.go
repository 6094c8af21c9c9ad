package health

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"

	"github.com/anvil-metal/anvil/agent/internal/nvme"
)

// NVMeLogSize is the size of the SMART / Health Information log page (log identifier
// 02h, NVM Express Base Specification 2.0, figure 207).
const NVMeLogSize = 512

// Critical warning bits of the log page.
const (
	WarnSpare       = 1 << 0 // available spare below its threshold
	WarnTemperature = 1 << 1 // temperature beyond a threshold
	WarnReliability = 1 << 2 // reliability degraded by media or internal errors
	WarnReadOnly    = 1 << 3 // media placed in read-only mode
	WarnBackup      = 1 << 4 // volatile memory backup device failed
	WarnPMR         = 1 << 5 // persistent memory region read-only or unreliable
)

// warnings name the critical warning bits, in order.
var warnings = []struct {
	bit  uint8
	text string
}{
	{WarnSpare, "available spare below its threshold"},
	{WarnTemperature, "temperature beyond a threshold"},
	{WarnReliability, "reliability degraded by media or internal errors"},
	{WarnReadOnly, "media placed in read-only mode"},
	{WarnBackup, "volatile memory backup failed"},
	{WarnPMR, "persistent memory region unreliable"},
}

// NVMeLog is what a controller's health log page says.
type NVMeLog struct {
	CriticalWarning uint8
	// TemperatureK is the composite temperature in kelvins.
	TemperatureK uint16
	// AvailableSpare and SpareThreshold are percentages of the spare capacity.
	AvailableSpare, SpareThreshold uint8
	// PercentUsed is the vendor's estimate of the life used; over 100 past it.
	PercentUsed uint8
	// MediaErrors are unrecovered data integrity errors; PowerOnHours and
	// UnsafeShutdowns as counted. 128-bit counters beyond 64 bits read as the maximum.
	MediaErrors, PowerOnHours, UnsafeShutdowns uint64
}

// ParseNVMeLog reads a health log page.
func ParseNVMeLog(b []byte) (NVMeLog, error) {
	if len(b) < NVMeLogSize {
		return NVMeLog{}, fmt.Errorf("NVMe health log is %d bytes, want %d", len(b), NVMeLogSize)
	}

	return NVMeLog{
		CriticalWarning: b[0],
		TemperatureK:    binary.LittleEndian.Uint16(b[1:3]),
		AvailableSpare:  b[3],
		SpareThreshold:  b[4],
		PercentUsed:     b[5],
		PowerOnHours:    counter(b[128:144]),
		UnsafeShutdowns: counter(b[144:160]),
		MediaErrors:     counter(b[160:176]),
	}, nil
}

// counter reads a 128-bit little-endian counter, saturating at 64 bits.
func counter(b []byte) uint64 {
	if binary.LittleEndian.Uint64(b[8:16]) != 0 {
		return math.MaxUint64
	}

	return binary.LittleEndian.Uint64(b[0:8])
}

// Thresholds are what a disk may show and still pass.
type Thresholds struct {
	// MaxPercentUsed is the most life used (vendor estimate) that passes.
	MaxPercentUsed uint8
	// MaxMediaErrors is the most unrecovered media errors that pass.
	MaxMediaErrors uint64
}

// DefaultThresholds pass a disk with no critical warning, no media error, life left and
// spare above its threshold.
var DefaultThresholds = Thresholds{MaxPercentUsed: 90}

// CheckNVMe judges a controller's health log.
func CheckNVMe(component string, log NVMeLog, th Thresholds) Check {
	c := Check{Component: component, Name: "NVMe health log", Status: Passed}

	for _, w := range warnings {
		if log.CriticalWarning&w.bit != 0 {
			c.Reasons = append(c.Reasons, "critical warning: "+w.text)
		}
	}

	if log.CriticalWarning&^0x3f != 0 {
		c.Reasons = append(c.Reasons, fmt.Sprintf("critical warning bits %#x", log.CriticalWarning&^0x3f))
	}

	if log.MediaErrors > th.MaxMediaErrors {
		c.Reasons = append(c.Reasons, fmt.Sprintf("%d media errors (at most %d pass)", log.MediaErrors, th.MaxMediaErrors))
	}

	if log.PercentUsed > th.MaxPercentUsed {
		c.Reasons = append(c.Reasons, fmt.Sprintf("%d%% of its life used (at most %d%% passes)", log.PercentUsed, th.MaxPercentUsed))
	}

	// The spare warning bit says the same where the drive sets it; some drives do not.
	if log.AvailableSpare < log.SpareThreshold && log.CriticalWarning&WarnSpare == 0 {
		c.Reasons = append(c.Reasons, fmt.Sprintf("available spare %d%% below its threshold %d%%", log.AvailableSpare, log.SpareThreshold))
	}

	if len(c.Reasons) > 0 {
		c.Status = Failed
	}

	c.Facts = []string{
		fmt.Sprintf("%d%% used", log.PercentUsed),
		fmt.Sprintf("spare %d%% (threshold %d%%)", log.AvailableSpare, log.SpareThreshold),
		fmt.Sprintf("%d media errors", log.MediaErrors),
		fmt.Sprintf("%d °C", int(log.TemperatureK)-273),
		fmt.Sprintf("%d power-on hours", log.PowerOnHours),
	}

	return c
}

// NoSMART is the check of a disk that offers no health log (virtio-blk, most USB
// bridges): unknown, never passed.
func NoSMART(component, transport string) Check {
	return Check{
		Component: component, Name: "SMART", Status: Unknown,
		Reasons: []string{fmt.Sprintf("a %s disk offers no SMART or NVMe health log", transport)},
	}
}

// logHealth is the SMART / Health Information log's identifier.
const logHealth = 0x02

// ReadNVMeLog asks the controller for its health log (for the whole controller).
func ReadNVMeLog(dev nvme.Device) (NVMeLog, error) {
	b, err := nvme.GetLogPage(dev, logHealth, nvme.GlobalNSID, NVMeLogSize)
	if err != nil {
		return NVMeLog{}, fmt.Errorf("error reading the NVMe health log: %w", err)
	}

	return ParseNVMeLog(b)
}

// CheckNVMeDevice checks the NVMe namespace at path: its controller's health log,
// judged; unknown where the log cannot be read.
func CheckNVMeDevice(component, path string, th Thresholds) Check {
	f, err := os.Open(path)
	if err != nil {
		return Check{Component: component, Name: "NVMe health log", Status: Unknown, Reasons: []string{err.Error()}}
	}

	defer f.Close()

	log, err := ReadNVMeLog(&nvme.File{F: f})
	if err != nil {
		return Check{Component: component, Name: "NVMe health log", Status: Unknown, Reasons: []string{err.Error()}}
	}

	return CheckNVMe(component, log, th)
}
