// Package tpm gives the agent's session the machine's TPM 2.0 identity: the endorsement
// key (EK) of the TCG default template, an attestation key (AK) made in the same TPM,
// and credential activation, with which the agent proves to the provider that it runs
// on the machine whose EK was bound at acceptance (internal/tpmid is the contract).
//
// Nothing is kept loaded in the TPM between uses: the EK (unless the platform persisted
// it at its TCG handle) and the AK are primary keys, which the TPM derives again, the
// same, from its hierarchies' seeds each time; each is flushed once used, so a kexec
// into Talos leaves no object behind on a TPM without the kernel's resource manager.
package tpm

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sync"

	"github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport"
	"github.com/google/go-tpm/tpm2/transport/linuxtpm"

	agentv1 "github.com/anvil-metal/anvil/api/agent/v1"
	"github.com/anvil-metal/anvil/internal/tpmid"
)

// Devices are where the agent looks for the TPM, under /dev: the kernel's resource
// manager first (it shares the TPM with whoever else uses it, Talos in agent mode, and
// flushes what a closed file left), then the raw device.
var Devices = []string{"tpmrm0", "tpm0"}

// ErrNoTPM is Open's error when the machine shows no TPM device.
var ErrNoTPM = errors.New("no TPM device (/dev/tpmrm0, /dev/tpm0): no TPM, a TPM 1.2, or one the firmware disabled")

// persistentEK is where the TCG EK credential profile persists each default template's
// EK (RSA-2048, ECC P-256), in EKTemplates' order.
var persistentEK = []tpm2.TPMHandle{0x81010001, 0x81010002}

// Identity is the machine's TPM identity.
type Identity struct {
	mu     sync.Mutex
	tpm    transport.TPMCloser
	device string
	// ek is the EK template's index in tpmid.EKTemplates.
	ek     int
	hello  *agentv1.TPMIdentity
	akName []byte
}

// Open opens the TPM under devRoot ("/dev" when empty), finds its EK, makes its AK once
// to read its public area, and returns the identity. ErrNoTPM when there is no device.
func Open(devRoot string) (*Identity, error) {
	if devRoot == "" {
		devRoot = "/dev"
	}

	for _, name := range Devices {
		path := filepath.Join(devRoot, name)

		t, err := linuxtpm.Open(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}

		if err != nil {
			return nil, fmt.Errorf("error opening the TPM %s: %w", path, err)
		}

		id := &Identity{tpm: t, device: path}
		if err = id.init(); err != nil {
			t.Close() // the init's error says more

			return nil, fmt.Errorf("TPM %s: %w", path, err)
		}

		return id, nil
	}

	return nil, ErrNoTPM
}

// Device is the TPM's device file.
func (id *Identity) Device() string { return id.device }

// Fingerprint is the EK's fingerprint, as the provider shows it.
func (id *Identity) Fingerprint() string { return tpmid.Fingerprint(id.hello.GetEkPublic()) }

// Hello is what the hello carries of the identity.
func (id *Identity) Hello() *agentv1.TPMIdentity { return id.hello }

// Close closes the device.
func (id *Identity) Close() error { return id.tpm.Close() }

// init finds the EK (the RSA template's, else the ECC one's) and the AK.
func (id *Identity) init() error {
	var errs []error

	for i := range tpmid.EKTemplates {
		ek, err := id.loadEK(i)
		if err != nil {
			errs = append(errs, err)

			continue
		}

		pub, err := ek.public.Contents()
		ek.flush()

		if err != nil {
			return fmt.Errorf("error reading the EK: %w", err)
		}

		der, err := tpmid.EKPublicDER(pub)
		if err != nil {
			return err
		}

		ak, err := id.createAK()
		if err != nil {
			return err
		}

		ak.flush()

		id.ek, id.akName = i, ak.name.Buffer
		id.hello = &agentv1.TPMIdentity{EkPublic: der, AkPublic: tpm2.Marshal(ak.public)}

		return nil
	}

	return fmt.Errorf("no EK of the default templates: %w", errors.Join(errs...))
}

// object is a loaded object and how to let it go.
type object struct {
	handle tpm2.TPMHandle
	name   tpm2.TPM2BName
	public tpm2.TPM2BPublic
	flush  func()
}

// loadEK returns the EK of template i: the one the platform persisted at its TCG
// handle, when it is that template's, else one created from the template.
func (id *Identity) loadEK(i int) (object, error) {
	template := tpmid.EKTemplates[i]

	if rsp, err := (tpm2.ReadPublic{ObjectHandle: persistentEK[i]}).Execute(id.tpm); err == nil && fromTemplate(rsp.OutPublic, template) {
		return object{handle: persistentEK[i], name: rsp.Name, public: rsp.OutPublic, flush: func() {}}, nil
	}

	rsp, err := tpm2.CreatePrimary{PrimaryHandle: tpm2.TPMRHEndorsement, InPublic: tpm2.New2B(template)}.Execute(id.tpm)
	if err != nil {
		return object{}, fmt.Errorf("error creating the EK (%v): %w", template.Type, err)
	}

	return object{handle: rsp.ObjectHandle, name: rsp.Name, public: rsp.OutPublic, flush: id.flusher(rsp.ObjectHandle)}, nil
}

// fromTemplate says whether a persisted key is the template's: all but its unique part
// the same.
func fromTemplate(pub tpm2.TPM2BPublic, template tpm2.TPMTPublic) bool {
	p, err := pub.Contents()
	if err != nil {
		return false
	}

	q := *p
	q.Unique = template.Unique

	return string(tpm2.Marshal(q)) == string(tpm2.Marshal(template))
}

// createAK creates the AK, a primary key of the owner hierarchy.
func (id *Identity) createAK() (object, error) {
	rsp, err := tpm2.CreatePrimary{PrimaryHandle: tpm2.TPMRHOwner, InPublic: tpm2.New2B(tpmid.AKTemplate)}.Execute(id.tpm)
	if err != nil {
		return object{}, fmt.Errorf("error creating the AK: %w", err)
	}

	return object{handle: rsp.ObjectHandle, name: rsp.Name, public: rsp.OutPublic, flush: id.flusher(rsp.ObjectHandle)}, nil
}

func (id *Identity) flusher(h tpm2.TPMHandle) func() {
	return func() {
		// Best effort: the resource manager flushes what is left when the file closes.
		_, _ = tpm2.FlushContext{FlushHandle: h}.Execute(id.tpm)
	}
}

// Activate recovers the secret of the provider's challenge with TPM2_ActivateCredential:
// the EK decrypts the seed (authorized by the EK's policy, PolicySecret of the
// endorsement hierarchy), and the TPM releases the secret only if the credential names
// the AK it holds. The TPM's commands are not interruptible: ctx is not consulted.
func (id *Identity) Activate(_ context.Context, c *agentv1.Challenge) ([]byte, error) {
	id.mu.Lock()
	defer id.mu.Unlock()

	ek, err := id.loadEK(id.ek)
	if err != nil {
		return nil, err
	}

	defer ek.flush()

	ak, err := id.createAK()
	if err != nil {
		return nil, err
	}

	defer ak.flush()

	if string(ak.name.Buffer) != string(id.akName) {
		return nil, errors.New("the AK is not the one shown in the hello (the owner hierarchy was cleared?)")
	}

	rsp, err := tpm2.ActivateCredential{
		ActivateHandle: tpm2.NamedHandle{Handle: ak.handle, Name: ak.name},
		KeyHandle:      tpm2.AuthHandle{Handle: ek.handle, Name: ek.name, Auth: tpm2.Policy(tpm2.TPMAlgSHA256, 16, ekPolicy)},
		CredentialBlob: tpm2.TPM2BIDObject{Buffer: c.GetCredentialBlob()},
		Secret:         tpm2.TPM2BEncryptedSecret{Buffer: c.GetEncryptedSecret()},
	}.Execute(id.tpm)
	if err != nil {
		return nil, fmt.Errorf("error activating the credential: %w", err)
	}

	return rsp.CertInfo.Buffer, nil
}

// ekPolicy satisfies the default EK template's policy: PolicySecret(TPM_RH_ENDORSEMENT).
func ekPolicy(t transport.TPM, handle tpm2.TPMISHPolicy, nonceTPM tpm2.TPM2BNonce) error {
	_, err := tpm2.PolicySecret{AuthHandle: tpm2.TPMRHEndorsement, PolicySession: handle, NonceTPM: nonceTPM}.Execute(t)

	return err //nolint:wrapcheck // go-tpm's error names the command
}
