// Validates custom resources (a JSON list of {name, resource} on stdin) with the schemas the
// CRD publishes, as @kubernetes-models ships them. Exit 1 with one line per problem.
import { ServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor";

const kinds = { "monitoring.coreos.com/v1/ServiceMonitor": ServiceMonitor };
let input = "";
process.stdin.on("data", (c) => (input += c));
process.stdin.on("end", () => {
  let failed = false;
  for (const { name, resource } of JSON.parse(input)) {
    const Model = kinds[`${resource.apiVersion}/${resource.kind}`];
    if (!Model) {
      console.log(`${name}: no schema for ${resource.apiVersion} ${resource.kind}`);
      failed = true;
      continue;
    }
    try {
      new Model(resource).validate();
    } catch (e) {
      console.log(`${name}: ${e.message}`);
      failed = true;
    }
  }
  process.exit(failed ? 1 : 0);
});
