// Package csi is the node side of CSI, as the kubelet's CSI volume plugin
// (pkg/volume/csi): Drivers is the registry of the node's CSI drivers, the
// pluginmanager Handler for plugins of type CSIPlugin, which publishes each
// registered driver in the node's CSINode, the node ID annotation and the
// topology labels; Plugin is the volume.Plugin "kubernetes.io/csi" that
// stages, publishes, unpublishes and unstages CSI PersistentVolumes and
// inline CSI volumes through those drivers, with the kubelet's paths and
// vol_data.json files.
//
// The agent wires both (agent.Volumes, agent.Plugins); an embedder without
// CSI leaves them out, one with a driver registry of its own gives the
// Plugin any NodeClients.
package csi
