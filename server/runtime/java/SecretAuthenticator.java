package io.tierlake.internal;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import javax.security.sasl.AuthenticationException;
import org.apache.hive.service.auth.PasswdAuthenticationProvider;

/**
 * The internal Spark Thrift Server's only login: the gateway's per-process
 * secret. The server process stores the secret's SHA-256 here over py4j
 * (never in a Spark setting or system property, which SQL `SET` or the Spark
 * UI would show); until it does, every login is refused.
 */
public final class SecretAuthenticator implements PasswdAuthenticationProvider {
    private static volatile byte[] digest;

    public static void setSecret(String secret) {
        digest = sha256(secret);
    }

    private static byte[] sha256(String s) {
        try {
            return MessageDigest.getInstance("SHA-256").digest(s.getBytes(StandardCharsets.UTF_8));
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    @Override
    public void Authenticate(String user, String password) throws AuthenticationException {
        byte[] expected = digest;
        if (expected == null || password == null || !MessageDigest.isEqual(expected, sha256(password))) {
            throw new AuthenticationException("the internal Spark Thrift Server accepts only the tierlake gateway");
        }
    }
}
