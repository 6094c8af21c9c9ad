package deploy_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	goyaml "go.yaml.in/yaml/v4"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// The examples.
const (
	unitFile    = "systemd/anvil-provider.service"
	envFile     = "systemd/anvil-provider.env"
	k8sManifest = "kubernetes/anvil-provider.yaml"
	composeFile = "compose/compose.yaml"
)

// What every example must give the provider: the image's user, the capabilities its
// binary carries, where its state lives (imager/internal/providerimage).
var (
	capabilities = []string{"NET_BIND_SERVICE", "NET_RAW"}
	stateDir     = "/var/lib/anvil"
	imageUID     = int64(10000)
)

// omniEnv are the variables the provider reads under Omni's names rather than ANVIL_.
var omniEnv = []string{"OMNI_ENDPOINT", "OMNI_SERVICE_ACCOUNT_KEY"}

// unit is a systemd unit file: each section's keys and their values, in order.
type unit map[string]map[string][]string

func readUnit(t *testing.T, file string) unit {
	t.Helper()

	b, err := os.ReadFile(file)
	require.NoError(t, err)

	u := unit{}
	section := ""

	for line := range strings.SplitSeq(string(b), "\n") {
		line = strings.TrimSpace(line)

		switch {
		case line == "", strings.HasPrefix(line, "#"), strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = strings.Trim(line, "[]")
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			require.True(t, ok, "%s: %q is no key=value", file, line)
			require.NotEmpty(t, section, "%s: %q is in no section", file, line)

			u[section][k] = append(u[section][k], v)
		}
	}

	return u
}

// one is the only value of a key.
func (u unit) one(t *testing.T, section, key string) string {
	t.Helper()

	require.Len(t, u[section][key], 1, "[%s] %s", section, key)

	return u[section][key][0]
}

// readEnvFile reads KEY=VALUE lines; commented-out ones ("#KEY=VALUE", examples to turn
// on) are returned apart.
func readEnvFile(t *testing.T, file string) (set, commented map[string]string) {
	t.Helper()

	b, err := os.ReadFile(file)
	require.NoError(t, err)

	set, commented = map[string]string{}, map[string]string{}
	assignment := regexp.MustCompile(`^(#?)([A-Z][A-Z0-9_]*)=(.*)$`)

	for line := range strings.SplitSeq(string(b), "\n") {
		if m := assignment.FindStringSubmatch(line); m != nil {
			if m[1] == "" {
				set[m[2]] = m[3]
			} else {
				commented[m[2]] = m[3]
			}
		} else {
			require.True(t, line == "" || strings.HasPrefix(line, "#"), "%s: %q is no assignment nor comment", file, line)
		}
	}

	return set, commented
}

// flagValue is the value of --name in args ("--name value" or "--name=value").
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}

		if a == "--"+name && i+1 < len(args) {
			return args[i+1], true
		}
	}

	return "", false
}

func TestSystemdUnit(t *testing.T) {
	t.Parallel()

	u := readUnit(t, unitFile)
	svc := u["Service"]

	assert.Equal(t, []string{"yes"}, svc["DynamicUser"], "a user of its own")
	assert.Equal(t, []string{"anvil"}, svc["StateDirectory"], "its state in /var/lib/anvil")
	assert.Equal(t, []string{"strict"}, svc["ProtectSystem"])
	assert.Equal(t, []string{"yes"}, svc["NoNewPrivileges"])

	for _, key := range []string{"AmbientCapabilities", "CapabilityBoundingSet"} {
		got := strings.Fields(u.one(t, "Service", key))
		assert.ElementsMatch(t, []string{"CAP_NET_BIND_SERVICE", "CAP_NET_RAW"}, got, key)
	}

	// The key: a credential of root's file, named to the provider by its path.
	cred, src, ok := strings.Cut(u.one(t, "Service", "LoadCredential"), ":")
	require.True(t, ok)
	assert.True(t, filepath.IsAbs(src), src)

	exec := strings.Fields(u.one(t, "Service", "ExecStart"))
	keyFile, ok := flagValue(exec, "omni-service-account-key-file")
	require.True(t, ok, "the key is read from its credential")
	assert.Equal(t, "${CREDENTIALS_DIRECTORY}/"+cred, keyFile)

	id, ok := flagValue(exec, "id")
	require.True(t, ok, "--id is given")
	assert.Equal(t, "${ANVIL_ID}", id)

	require.Equal(t, []string{"/etc/anvil/anvil-provider.env"}, svc["EnvironmentFile"], "the file deploy/README.md installs")

	env, _ := readEnvFile(t, envFile)
	assert.NotEmpty(t, env["ANVIL_ID"], "--id's value")
	endpoint, err := url.Parse(env["OMNI_ENDPOINT"])
	require.NoError(t, err)
	assert.Equal(t, "https", endpoint.Scheme)
	assert.NotContains(t, env, "OMNI_SERVICE_ACCOUNT_KEY", "the key is a credential, not in the environment")
}

// TestSystemdAnalyzeVerify has systemd check the unit. It wants ExecStart's binary to
// exist: a copy of the unit names an executable of the test's.
func TestSystemdAnalyzeVerify(t *testing.T) {
	t.Parallel()

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("needs systemd-analyze (Debian's systemd package) to verify the unit")
	}

	b, err := os.ReadFile(unitFile)
	require.NoError(t, err)

	const bin = "/usr/local/bin/anvil-provider"

	require.Contains(t, string(b), "ExecStart="+bin+" ")

	dir := t.TempDir()
	stand := filepath.Join(dir, "anvil-provider")
	require.NoError(t, os.WriteFile(stand, []byte("#!/bin/sh\n"), 0o755))

	verify := func(unit string) string {
		p := filepath.Join(dir, "anvil-provider.service")
		require.NoError(t, os.WriteFile(p, []byte(strings.Replace(unit, "ExecStart="+bin, "ExecStart="+stand, 1)), 0o644))

		out, err := exec.Command(analyze, "verify", "--man=no", p).CombinedOutput()
		if err != nil {
			return fmt.Sprintf("%v: %s", err, out)
		}

		return strings.TrimSpace(string(out))
	}

	assert.Empty(t, verify(string(b)), "systemd-analyze verify has something to say")

	// It does say something of a unit that is wrong, a warning as much as an error.
	assert.Contains(t, verify(strings.Replace(string(b), "ProtectClock=", "ProtectClok=", 1)), "Unknown key 'ProtectClok'")
}

// manifest is the Kubernetes manifest's objects, decoded strictly (no unknown field,
// no duplicate key) into their types.
type manifest struct {
	namespace  corev1.Namespace
	secret     corev1.Secret
	claim      corev1.PersistentVolumeClaim
	deployment appsv1.Deployment
}

func readManifest(t *testing.T, b []byte) (manifest, error) {
	t.Helper()

	var (
		m    manifest
		errs []error
	)

	r := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))

	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}

		require.NoError(t, err)

		var tm metav1.TypeMeta
		require.NoError(t, yaml.Unmarshal(doc, &tm))

		var obj any

		switch tm.APIVersion + "/" + tm.Kind {
		case "v1/Namespace":
			obj = &m.namespace
		case "v1/Secret":
			obj = &m.secret
		case "v1/PersistentVolumeClaim":
			obj = &m.claim
		case "apps/v1/Deployment":
			obj = &m.deployment
		default:
			t.Fatalf("%s: unexpected object %s %s", k8sManifest, tm.APIVersion, tm.Kind)
		}

		errs = append(errs, yaml.UnmarshalStrict(doc, obj))
	}

	return m, errors.Join(errs...)
}

func TestKubernetesManifest(t *testing.T) {
	t.Parallel()

	b, err := os.ReadFile(k8sManifest)
	require.NoError(t, err)

	m, err := readManifest(t, b)
	require.NoError(t, err)

	ns := m.namespace.Name
	require.NotEmpty(t, ns)
	assert.Equal(t, "privileged", m.namespace.Labels["pod-security.kubernetes.io/enforce"], "a host-network pod is not baseline")

	for _, meta := range []metav1.ObjectMeta{m.secret.ObjectMeta, m.claim.ObjectMeta, m.deployment.ObjectMeta} {
		assert.Equal(t, ns, meta.Namespace, meta.Name)
	}

	d := m.deployment.Spec
	require.NotNil(t, d.Replicas)
	assert.Equal(t, int32(1), *d.Replicas, "one provider per infra provider ID")
	assert.Equal(t, appsv1.RecreateDeploymentStrategyType, d.Strategy.Type, "the old one lets go of the host's ports first")

	pod := d.Template.Spec
	assert.True(t, pod.HostNetwork, "DHCP is broadcast")
	assert.Equal(t, corev1.DNSClusterFirstWithHostNet, pod.DNSPolicy)
	assert.NotEmpty(t, pod.NodeSelector, "on a node of the provisioning network")
	assert.Equal(t, d.Selector.MatchLabels, m.deployment.Spec.Template.Labels)

	sc := pod.SecurityContext
	require.NotNil(t, sc)
	require.NotNil(t, sc.RunAsNonRoot)
	assert.True(t, *sc.RunAsNonRoot)
	assert.Equal(t, &imageUID, sc.RunAsUser)
	assert.Equal(t, &imageUID, sc.FSGroup, "the state volume is writable by the image's group")

	require.Len(t, pod.Containers, 1)
	c := pod.Containers[0]

	id, ok := flagValue(c.Args, "id")
	require.True(t, ok, "--id is given")
	assert.NotEmpty(t, id)

	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}

	endpoint, err := url.Parse(env["OMNI_ENDPOINT"].Value)
	require.NoError(t, err)
	assert.Equal(t, "https", endpoint.Scheme)

	key := env["OMNI_SERVICE_ACCOUNT_KEY"]
	assert.Empty(t, key.Value, "never in the manifest")
	require.NotNil(t, key.ValueFrom)
	require.NotNil(t, key.ValueFrom.SecretKeyRef)
	assert.Equal(t, m.secret.Name, key.ValueFrom.SecretKeyRef.Name)
	assert.Contains(t, m.secret.StringData, key.ValueFrom.SecretKeyRef.Key)

	csc := c.SecurityContext
	require.NotNil(t, csc)
	require.NotNil(t, csc.Capabilities)
	assert.Equal(t, []corev1.Capability{"ALL"}, csc.Capabilities.Drop)
	added := make([]string, 0, len(csc.Capabilities.Add))
	for _, c := range csc.Capabilities.Add {
		added = append(added, string(c))
	}

	assert.ElementsMatch(t, capabilities, added)
	require.NotNil(t, csc.AllowPrivilegeEscalation)
	assert.False(t, *csc.AllowPrivilegeEscalation, "file capabilities within the container's set need no escalation")
	require.NotNil(t, csc.ReadOnlyRootFilesystem)
	assert.True(t, *csc.ReadOnlyRootFilesystem)

	mounts := map[string]string{}
	for _, vm := range c.VolumeMounts {
		mounts[vm.MountPath] = vm.Name
	}

	volumes := map[string]corev1.VolumeSource{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v.VolumeSource
	}

	state := volumes[mounts[stateDir]].PersistentVolumeClaim
	require.NotNil(t, state, "the state on the claim")
	assert.Equal(t, m.claim.Name, state.ClaimName)
	assert.NotNil(t, volumes[mounts["/tmp"]].EmptyDir, "a writable /tmp beside a read-only root")

	for _, probe := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
		require.NotNil(t, probe)
		require.NotNil(t, probe.HTTPGet)
		assert.Equal(t, "/healthz", probe.HTTPGet.Path)
	}

	// Strict: a misspelt field is an error, not a field dropped.
	_, err = readManifest(t, bytes.Replace(b, []byte("hostNetwork:"), []byte("hostNetwrok:"), 1))
	assert.ErrorContains(t, err, `unknown field "hostNetwrok"`)
}

// compose is the part of the Compose specification the example uses; decoding refuses
// any other field.
type compose struct {
	Name     string                    `yaml:"name"`
	Services map[string]composeService `yaml:"services"`
	Secrets  map[string]struct {
		File string `yaml:"file"`
	} `yaml:"secrets"`
	Volumes map[string]*struct{} `yaml:"volumes"`
}

type composeService struct {
	Image       string            `yaml:"image"`
	Restart     string            `yaml:"restart"`
	NetworkMode string            `yaml:"network_mode"`
	CapDrop     []string          `yaml:"cap_drop"`
	CapAdd      []string          `yaml:"cap_add"`
	SecurityOpt []string          `yaml:"security_opt"`
	ReadOnly    bool              `yaml:"read_only"`
	Tmpfs       []string          `yaml:"tmpfs"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Secrets     []string          `yaml:"secrets"`
	Volumes     []string          `yaml:"volumes"`
}

func readCompose(t *testing.T) compose {
	t.Helper()

	b, err := os.ReadFile(composeFile)
	require.NoError(t, err)

	var c compose

	dec := goyaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(&c))

	return c
}

func TestComposeFile(t *testing.T) {
	t.Parallel()

	c := readCompose(t)
	require.Len(t, c.Services, 1)

	for _, s := range c.Services {
		assert.NotEmpty(t, s.Image)
		assert.Equal(t, "host", s.NetworkMode, "DHCP is broadcast")
		assert.Equal(t, []string{"ALL"}, s.CapDrop)
		assert.ElementsMatch(t, capabilities, s.CapAdd)
		assert.Contains(t, s.SecurityOpt, "no-new-privileges:true")

		assert.True(t, s.ReadOnly)
		assert.Contains(t, s.Tmpfs, "/tmp", "a writable /tmp beside a read-only root")

		id, ok := flagValue(s.Command, "id")
		require.True(t, ok, "--id is given")
		assert.NotEmpty(t, id)

		endpoint, err := url.Parse(s.Environment["OMNI_ENDPOINT"])
		require.NoError(t, err)
		assert.Equal(t, "https", endpoint.Scheme)
		assert.NotContains(t, s.Environment, "OMNI_SERVICE_ACCOUNT_KEY", "the key is a secret, not in the environment")

		// The key: a secret, which Compose mounts at /run/secrets/<name>.
		require.Len(t, s.Secrets, 1)
		secret := s.Secrets[0]
		assert.NotEmpty(t, c.Secrets[secret].File, "secret %s is declared with its file", secret)

		keyFile, ok := flagValue(s.Command, "omni-service-account-key-file")
		require.True(t, ok, "the key is read from its secret")
		assert.Equal(t, "/run/secrets/"+secret, keyFile)

		volume, path, ok := strings.Cut(s.Volumes[0], ":")
		require.True(t, ok)
		assert.Equal(t, stateDir, path)
		assert.Contains(t, c.Volumes, volume, "a named volume, which takes the image's ownership")
	}
}

// TestExamplesUseProviderFlags checks every flag and variable the examples give the
// provider against the provider's own --help: a flag, an ANVIL_ variable or one of
// Omni's it reads.
func TestExamplesUseProviderFlags(t *testing.T) {
	t.Parallel()

	flags, envs := providerHelp(t)

	var (
		usedFlags []string
		usedEnv   []string
	)

	collect := func(where string, args []string, env []string) {
		for _, a := range args {
			if name, ok := strings.CutPrefix(a, "--"); ok {
				name, _, _ = strings.Cut(name, "=")
				usedFlags = append(usedFlags, where+": --"+name)

				assert.Contains(t, flags, name, "%s gives --%s, which the provider has not", where, name)
			}
		}

		for _, e := range env {
			usedEnv = append(usedEnv, where+": "+e)

			if !slices.Contains(omniEnv, e) {
				assert.Contains(t, envs, e, "%s sets %s, which the provider does not read", where, e)
			}
		}
	}

	u := readUnit(t, unitFile)
	set, commented := readEnvFile(t, envFile)
	collect(unitFile, strings.Fields(u.one(t, "Service", "ExecStart"))[1:], nil)
	collect(envFile, nil, slices.Concat(slices.Collect(maps.Keys(set)), slices.Collect(maps.Keys(commented))))

	b, err := os.ReadFile(k8sManifest)
	require.NoError(t, err)

	m, err := readManifest(t, b)
	require.NoError(t, err)

	for _, c := range m.deployment.Spec.Template.Spec.Containers {
		var env []string
		for _, e := range c.Env {
			env = append(env, e.Name)
		}

		collect(k8sManifest, slices.Concat(c.Command, c.Args), env)
	}

	for _, s := range readCompose(t).Services {
		collect(composeFile, s.Command, slices.Collect(maps.Keys(s.Environment)))
	}

	t.Logf("flags: %s\nvariables: %s", strings.Join(usedFlags, ", "), strings.Join(usedEnv, ", "))

	// Omni's own names are the provider's too.
	for _, e := range omniEnv {
		assert.Contains(t, envs, e)
	}
}

// providerHelp builds the provider from this tree and reads its flags and the variables
// it reads from its --help.
func providerHelp(t *testing.T) (flags, envs []string) {
	t.Helper()

	bin := filepath.Join(t.TempDir(), "provider")

	build := exec.Command("go", "build", "-o", bin, "./provider/cmd/provider")
	build.Dir = ".."

	out, err := build.CombinedOutput()
	require.NoError(t, err, "building the provider: %s", out)

	help, err := exec.Command(bin, "--help").CombinedOutput()
	require.NoError(t, err, "%s", help)

	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9-]+)`).FindAllStringSubmatch(string(help), -1) {
		flags = append(flags, m[1])
	}

	for _, m := range regexp.MustCompile(`\$([A-Z][A-Z0-9_]+)`).FindAllStringSubmatch(string(help), -1) {
		envs = append(envs, m[1])
	}

	require.Contains(t, flags, "id", "the help lists the flags:\n%s", help)

	return flags, envs
}
