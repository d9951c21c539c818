// One HTTPS request through the proxy in the environment (HTTPS_PROXY), by undici's
// EnvHttpProxyAgent, printed as `STATUS BODY` on one line. The CA comes from
// NODE_EXTRA_CA_CERTS. usage: node undici_client.mjs URL [HEADER: VALUE]
import { fetch, EnvHttpProxyAgent } from 'undici';

const [url, header] = process.argv.slice(2);
const headers = {};
if (header) {
  const i = header.indexOf(': ');
  headers[header.slice(0, i)] = header.slice(i + 2);
}
const res = await fetch(url, { headers, dispatcher: new EnvHttpProxyAgent() });
const body = await res.text();
console.log(`${res.status} ${body.replace(/\n/g, ' ').trim()}`);
