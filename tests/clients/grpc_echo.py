"""A gRPC echo over TLS (grpcio, generic handlers: no generated code), and its client.

server: grpc_echo.py serve CERT KEY       prints its port, then serves /echo.Echo/Say,
        answering `path=... auth=<authorization metadata> msg=<request bytes>`
client: grpc_echo.py call HOST:PORT CA METHOD [AUTH]
        calls METHOD through the proxy in the environment (https_proxy) and prints
        `OK <reply>` or `ERR <status code name> <details>`
"""
import sys
import grpc
from concurrent import futures


def identity(b):
    return b


def serve(cert, key):
    def say(request, context):
        meta = dict(context.invocation_metadata())
        return b"auth=%s msg=%s" % (meta.get("authorization", "-").encode(), request)

    handler = grpc.method_handlers_generic_handler(
        "echo.Echo",
        {
            "Say": grpc.unary_unary_rpc_method_handler(
                say, request_deserializer=identity, response_serializer=identity
            ),
            "Admin": grpc.unary_unary_rpc_method_handler(
                say, request_deserializer=identity, response_serializer=identity
            ),
        },
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((handler,))
    creds = grpc.ssl_server_credentials([(open(key, "rb").read(), open(cert, "rb").read())])
    port = server.add_secure_port("127.0.0.1:0", creds)
    server.start()
    print(port, flush=True)
    server.wait_for_termination()


def call(target, ca, method, auth):
    creds = grpc.ssl_channel_credentials(root_certificates=open(ca, "rb").read())
    with grpc.secure_channel(target, creds) as channel:
        stub = channel.unary_unary(method, request_serializer=identity, response_deserializer=identity)
        metadata = [("authorization", auth)] if auth else []
        try:
            reply = stub(b"hello", metadata=metadata, timeout=20)
            print("OK", reply.decode())
        except grpc.RpcError as e:
            print("ERR", e.code().name, e.details())


if sys.argv[1] == "serve":
    serve(sys.argv[2], sys.argv[3])
else:
    call(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5] if len(sys.argv) > 5 else None)
