package control

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	controlv1 "github.com/anvil-metal/anvil/api/control/v1"
)

// backupChunkSize keeps each message well under the server's send limit.
const backupChunkSize = 1 << 20

// StateBackup takes a consistent, verified backup of the provider's state and returns
// its path (the store's Backup).
type StateBackup interface {
	Backup(ctx context.Context) (string, error)
}

// StateService is the state part of the control API: online backups.
type StateService struct {
	controlv1.UnimplementedStateServiceServer

	backup StateBackup
	logger *zap.Logger
}

// NewStateService returns the gRPC state service over backup; a nil backup answers
// Unavailable.
func NewStateService(backup StateBackup, logger *zap.Logger) *StateService {
	if logger == nil {
		logger = zap.NewNop()
	}

	return &StateService{backup: backup, logger: logger}
}

// BackupState implements controlv1.StateServiceServer.
func (s *StateService) BackupState(_ *controlv1.BackupStateRequest, stream controlv1.StateService_BackupStateServer) error {
	if s.backup == nil {
		return status.Error(codes.Unavailable, "this provider serves no state backups")
	}

	ctx := stream.Context()

	path, err := s.backup.Backup(ctx)
	if err != nil {
		s.logger.Warn("state backup failed", zap.Error(err))

		return status.Error(codes.Unavailable, err.Error())
	}

	f, err := os.Open(path)
	if err != nil {
		return status.Errorf(codes.Internal, "error reading backup: %v", err)
	}
	defer f.Close()

	size, sum, err := digest(f)
	if err != nil {
		return status.Errorf(codes.Internal, "error reading backup: %v", err)
	}

	if err := stream.Send(&controlv1.BackupStateChunk{Name: filepath.Base(path), Size: size, Sha256: sum}); err != nil {
		return err
	}

	buf := make([]byte, backupChunkSize)

	for {
		n, err := f.Read(buf)
		if n > 0 {
			if serr := stream.Send(&controlv1.BackupStateChunk{Data: buf[:n]}); serr != nil {
				return serr
			}
		}

		if err == io.EOF {
			break
		}

		if err != nil {
			return status.Errorf(codes.Internal, "error reading backup: %v", err)
		}
	}

	s.logger.Info("state backup sent", zap.String("file", path), zap.Int64("size", size))

	return nil
}

// digest returns f's size and SHA-256 and rewinds it.
func digest(f *os.File) (int64, string, error) {
	h := sha256.New()

	n, err := io.Copy(h, f)
	if err != nil {
		return 0, "", err
	}

	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, "", fmt.Errorf("error rewinding: %w", err)
	}

	return n, hex.EncodeToString(h.Sum(nil)), nil
}
