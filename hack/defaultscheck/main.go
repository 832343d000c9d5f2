// Command defaultscheck compares podsource.SetDefaults with the API
// server's own pod defaulting (k8s.io/kubernetes pkg/apis/core/v1
// SetObjectDefaults_Pod, default feature gates) on randomly filled pods, and
// exits non-zero when they differ. It is a module of its own so that
// k8s.io/kubernetes stays out of the library's go.mod; run it after bumping
// k8s.io/* or changing podsource/defaults.go:
//
//	cd hack/defaultscheck && go run .          # NODEF=1 shows it can fail
package main

import (
	"fmt"
	"math/rand"
	"os"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	corev1 "k8s.io/kubernetes/pkg/apis/core/v1"
	"sigs.k8s.io/randfill"

	"github.com/nodekit/nodekit/podsource"
)

func main() {
	images := []string{"", "nginx", "nginx:latest", "nginx:1.2", "r:5000/x", "x@sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "Bad Image", "a/b:latest"}
	quantities := []string{"1", "1.0001", "100m", "0.5", "1Gi", "1.5Ki", "3e-4"}
	f := randfill.New().NilChance(0.5).NumElements(0, 2).MaxDepth(12).Funcs(
		func(q *resource.Quantity, c randfill.Continue) {
			*q = resource.MustParse(quantities[c.Intn(len(quantities))])
		},
		func(s *v1.Container, c randfill.Continue) {
			c.FillNoCustom(s)
			s.Image = images[c.Intn(len(images))]
			if c.Intn(2) == 0 {
				s.ImagePullPolicy = ""
			}
			if c.Intn(2) == 0 {
				s.TerminationMessagePath, s.TerminationMessagePolicy = "", ""
			}
		},
		func(s *v1.ContainerPort, c randfill.Continue) {
			c.FillNoCustom(s)
			if c.Intn(2) == 0 {
				s.Protocol, s.HostPort = "", 0
			}
		},
		func(p *v1.Probe, c randfill.Continue) {
			c.FillNoCustom(p)
			if c.Intn(2) == 0 {
				p.TimeoutSeconds, p.PeriodSeconds, p.SuccessThreshold, p.FailureThreshold = 0, 0, 0, 0
			}
		},
		func(a *v1.HTTPGetAction, c randfill.Continue) {
			c.FillNoCustom(a)
			if c.Intn(2) == 0 {
				a.Path, a.Scheme = "", ""
			}
		},
		func(s *v1.PodSpec, c randfill.Continue) {
			c.FillNoCustom(s)
			if c.Intn(2) == 0 {
				s.DNSPolicy, s.RestartPolicy, s.SchedulerName = "", "", ""
			}
			if c.Intn(3) == 0 {
				s.ServiceAccountName = ""
			}
		},
		func(v *v1.VolumeSource, c randfill.Continue) {
			// One source or none, as real pods.
			*v = v1.VolumeSource{}
			switch c.Intn(12) {
			case 0:
			case 1:
				v.HostPath = &v1.HostPathVolumeSource{}
				c.Fill(v.HostPath)
			case 2:
				v.Secret = &v1.SecretVolumeSource{}
				c.Fill(v.Secret)
			case 3:
				v.ConfigMap = &v1.ConfigMapVolumeSource{}
				c.Fill(v.ConfigMap)
			case 4:
				v.DownwardAPI = &v1.DownwardAPIVolumeSource{}
				c.Fill(v.DownwardAPI)
			case 5:
				v.Projected = &v1.ProjectedVolumeSource{}
				c.Fill(v.Projected)
			case 6:
				v.Image = &v1.ImageVolumeSource{}
				c.Fill(v.Image)
				v.Image.Reference = images[c.Intn(len(images))]
				if c.Intn(2) == 0 {
					v.Image.PullPolicy = ""
				}
			case 7:
				v.Ephemeral = &v1.EphemeralVolumeSource{}
				c.Fill(v.Ephemeral)
			case 8:
				v.RBD = &v1.RBDVolumeSource{}
				c.Fill(v.RBD)
				if c.Intn(2) == 0 {
					v.RBD.RBDPool, v.RBD.RadosUser, v.RBD.Keyring = "", "", ""
				}
			case 9:
				v.AzureDisk = &v1.AzureDiskVolumeSource{}
				c.Fill(v.AzureDisk)
			case 10:
				v.ScaleIO = &v1.ScaleIOVolumeSource{}
				c.Fill(v.ScaleIO)
				if c.Intn(2) == 0 {
					v.ScaleIO.StorageMode, v.ScaleIO.FSType = "", ""
				}
			case 11:
				v.ISCSI = &v1.ISCSIVolumeSource{}
				c.Fill(v.ISCSI)
				if c.Intn(2) == 0 {
					v.ISCSI.ISCSIInterface = ""
				}
			}
		},
	)
	n, diffs := 0, 0
	for i := 0; i < 20000; i++ {
		f.RandSource(rand.NewSource(int64(i)))
		p := &v1.Pod{}
		f.Fill(p)
		want := p.DeepCopy()
		corev1.SetObjectDefaults_Pod(want)
		got := p.DeepCopy()
		if os.Getenv("NODEF") == "" {
			podsource.SetDefaults(got)
		}
		n++
		if !equality.Semantic.DeepEqual(want, got) {
			diffs++
			if diffs <= 3 {
				fmt.Printf("seed %d differs:\n%s\n", i, diffSpec(want, got))
			}
		}
	}
	fmt.Printf("%d pods, %d differ\n", n, diffs)
	if diffs > 0 {
		os.Exit(1)
	}
}

func diffSpec(a, b *v1.Pod) string {
	return fmt.Sprintf("upstream spec: %+v\nours spec: %+v", a.Spec, b.Spec)
}
