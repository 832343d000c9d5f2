// Package checkpoint reads and writes the device manager's checkpoint file,
// kubelet_internal_checkpoint, byte for byte in the kubelet's format: the
// JSON of {Data: {PodDeviceEntries, RegisteredDevices}, Checksum}, where the
// checksum is the kubelet checkpointmanager's FNV-32a of the data's
// spew dump. The package and type names are part of that dump
// ("checkpoint.checkpointData"), so they must not change: a kubelet must
// read what nodekit writes and the other way round.
package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"

	"k8s.io/utils/dump"

	"github.com/nodekit/nodekit/internal/atomicfile"
)

// FileName is the checkpoint's name in the device plugin directory.
const FileName = "kubelet_internal_checkpoint"

// ErrNotFound is returned by Read when there is no checkpoint file.
var ErrNotFound = errors.New("checkpoint is not found")

// DevicesPerNUMA is the device IDs of one allocation by NUMA node ID (-1
// for devices without topology), as the kubelet stores them.
type DevicesPerNUMA map[int64][]string

// PodDevicesEntry is one container's allocation of one resource; AllocResp
// is the plugin's ContainerAllocateResponse in protobuf wire format.
type PodDevicesEntry struct {
	PodUID        string
	ContainerName string
	ResourceName  string
	DeviceIDs     DevicesPerNUMA
	AllocResp     []byte
}

type checkpointData struct {
	PodDeviceEntries  []PodDevicesEntry
	RegisteredDevices map[string][]string
}

type data struct {
	Data     checkpointData
	Checksum uint64
}

func checksum(d checkpointData) uint64 {
	h := fnv.New32a()
	fmt.Fprintf(h, "%v", dump.ForHash(d))
	return uint64(h.Sum32())
}

// Marshal returns the checkpoint file's content for entries and the
// registered (healthy) devices by resource name.
func Marshal(entries []PodDevicesEntry, registered map[string][]string) ([]byte, error) {
	if entries == nil {
		entries = []PodDevicesEntry{}
	}
	if registered == nil {
		registered = map[string][]string{}
	}
	d := data{Data: checkpointData{PodDeviceEntries: entries, RegisteredDevices: registered}}
	d.Checksum = checksum(d.Data)
	return json.Marshal(d)
}

// Unmarshal parses a checkpoint file's content and verifies its checksum.
func Unmarshal(blob []byte) ([]PodDevicesEntry, map[string][]string, error) {
	var d data
	if err := json.Unmarshal(blob, &d); err != nil {
		return nil, nil, fmt.Errorf("parse device manager checkpoint: %w", err)
	}
	if cs := checksum(d.Data); cs != d.Checksum {
		return nil, nil, fmt.Errorf("device manager checkpoint is corrupt: checksum %d, expected %d", cs, d.Checksum)
	}
	return d.Data.PodDeviceEntries, d.Data.RegisteredDevices, nil
}

// Read reads and verifies the checkpoint in dir; ErrNotFound when absent.
func Read(dir string) ([]PodDevicesEntry, map[string][]string, error) {
	blob, err := os.ReadFile(filepath.Join(dir, FileName))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, ErrNotFound
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read device manager checkpoint: %w", err)
	}
	return Unmarshal(blob)
}

// Write writes the checkpoint into dir atomically (a temporary file
// renamed over the old one, as the kubelet's file store).
func Write(dir string, entries []PodDevicesEntry, registered map[string][]string) error {
	blob, err := Marshal(entries, registered)
	if err != nil {
		return fmt.Errorf("marshal device manager checkpoint: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(dir, FileName), blob); err != nil {
		return fmt.Errorf("write device manager checkpoint %s: %w", filepath.Join(dir, FileName), err)
	}
	return nil
}
