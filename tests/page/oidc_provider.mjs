// tests/page/oidc_provider.mjs: a real OpenID provider on loopback for the page's sign-in test
// (tests/page/run), the certified `oidc-provider` package with its development login form
// (any login and password sign in; "[ Cancel ]" refuses). Not for anything but tests.
//
// Environment: OIDC_PORT (where it listens, on 127.0.0.1), PAGE_URL (the chat page: the test
// client's redirect and post-logout URI, and the only origin its token endpoint answers CORS
// requests from), AUDIENCE (the `aud` of its access tokens, the chat's JWT_AUDIENCE),
// ACCESS_TOKEN_TTL (seconds; short, so the page's refresh is exercised), CLIENT_ID.
// Prints `issuer <url>` once it listens.
//
// The client is public (no secret, PKCE required, as for every public client here), gets
// refresh tokens without `offline_access` (the page asks for `openid profile email`), and its
// access tokens are RS256 JWTs for AUDIENCE (resource indicators with a default resource), signed
// with a key made at start and published at /jwks.

import { generateKeyPairSync, randomBytes } from "node:crypto";

import Provider from "oidc-provider";

const need = (name) => {
  const value = process.env[name];
  if (!value) {
    console.error(`oidc_provider.mjs: set ${name}`);
    process.exit(2);
  }
  return value;
};
const port = Number(need("OIDC_PORT"));
const pageUrl = need("PAGE_URL");
const audience = need("AUDIENCE");
const accessTokenTTL = Number(need("ACCESS_TOKEN_TTL"));
const clientId = need("CLIENT_ID");
const issuer = `http://127.0.0.1:${port}`;

const { privateKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
const signingKey = { ...privateKey.export({ format: "jwk" }), kid: `page-test-${Date.now()}`, alg: "RS256", use: "sig" };

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: clientId,
      client_name: "Parley page test",
      token_endpoint_auth_method: "none",
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      redirect_uris: [pageUrl],
      post_logout_redirect_uris: [pageUrl],
    },
  ],
  jwks: { keys: [signingKey] },
  cookies: { keys: [randomBytes(32).toString("hex")] },
  claims: { openid: ["sub"], profile: ["name"], email: ["email"] },
  async findAccount(_ctx, id) {
    return { accountId: id, claims: async () => ({ sub: id, name: id, email: `${id}@example.org` }) };
  },
  features: {
    devInteractions: { enabled: true },
    revocation: { enabled: true },
    rpInitiatedLogout: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: async () => audience,
      useGrantedResource: async () => true,
      getResourceServerInfo: async (_ctx, indicator) => {
        if (indicator !== audience) throw new Provider.errors.InvalidTarget();
        return {
          scope: "chat",
          audience,
          accessTokenTTL,
          accessTokenFormat: "jwt",
          jwt: { sign: { alg: "RS256" } },
        };
      },
    },
  },
  // The consent screen grants the resource's `chat` scope along with openid ones.
  scopes: ["openid", "profile", "email", "chat", "offline_access"],
  issueRefreshToken: async (_ctx, client) => client.grantTypeAllowed("refresh_token"),
  clientBasedCORS: (_ctx, origin) => origin === new URL(pageUrl).origin,
  ttl: {
    AccessToken: accessTokenTTL,
    AuthorizationCode: 60,
    IdToken: 3600,
    RefreshToken: 3600,
    Grant: 3600,
    Interaction: 600,
    Session: 3600,
  },
});

provider.on("server_error", (_ctx, error) => console.error("oidc_provider.mjs: server_error", error));

provider.listen(port, "127.0.0.1", () => {
  console.log(`issuer ${issuer}`);
});
