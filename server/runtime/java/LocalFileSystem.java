package io.tierlake.internal;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's {@code file:} file system (checksums included) that sets file
 * modes through {@code java.nio} instead of a {@code chmod} process.
 *
 * <p>Without Hadoop's native library (pyspark ships none) RawLocalFileSystem
 * forks {@code chmod} for every file and directory it creates with a
 * permission, and every Iceberg and Spark write passes one: two processes per
 * file with its {@code .crc}, eight per commit of a small table. Measured in
 * the soak, those forks were the largest part of a coordinator commit.
 * The mode set is the same (sticky and set-id bits aside, which Hadoop's
 * {@code chmod} of a new file or directory does not use either).
 */
public class LocalFileSystem extends org.apache.hadoop.fs.LocalFileSystem {
    private static final PosixFilePermission[] BITS = {
        PosixFilePermission.OTHERS_EXECUTE, PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_READ,
        PosixFilePermission.GROUP_EXECUTE, PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_READ,
        PosixFilePermission.OWNER_EXECUTE, PosixFilePermission.OWNER_WRITE, PosixFilePermission.OWNER_READ,
    };

    public LocalFileSystem() {
        super(new Raw());
    }

    static Set<PosixFilePermission> posix(short mode) {
        Set<PosixFilePermission> set = EnumSet.noneOf(PosixFilePermission.class);
        for (int bit = 0; bit < BITS.length; bit++) {
            if ((mode & (1 << bit)) != 0) {
                set.add(BITS[bit]);
            }
        }
        return set;
    }

    /** The raw (checksum-less) file system underneath. */
    public static class Raw extends RawLocalFileSystem {
        @Override
        public void setPermission(Path p, FsPermission permission) throws IOException {
            Files.setPosixFilePermissions(pathToFile(p).toPath(), posix(permission.toShort()));
        }
    }
}
