// Kafka Streams 4.4 word count for tests/integration/test_java_apps.py: lines of the input topic are split into
// words, re-keyed (a repartition topic), counted in a RocksDB store "counts" (a changelog topic) and written to the
// output topic, with processing.guarantee=exactly_once_v2 (GUARANTEE, when given, replaces it).
//
//   java WordCount BOOTSTRAP APP_ID INPUT OUTPUT STATE_DIR HTTP_PORT GROUP_PROTOCOL [GUARANTEE]
//
// An HTTP server of the JDK on 127.0.0.1:HTTP_PORT answers the interactive query
//   GET /state           -> the KafkaStreams state (RUNNING, REBALANCING, ...)
//   GET /count?word=W    -> 200 and the count of W from the local store, 404 when this instance does not host W's
//                           partition, 503 while the store cannot be queried (a rebalance)
// Stops on SIGTERM (close), exits 1 when the client reaches ERROR.
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Arrays;
import java.util.Locale;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyQueryMetadata;
import org.apache.kafka.streams.StoreQueryParameters;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.QueryableStoreTypes;
import org.apache.kafka.streams.state.ReadOnlyKeyValueStore;

public class WordCount {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], appId = args[1], input = args[2], output = args[3], stateDir = args[4];
        int httpPort = Integer.parseInt(args[5]);
        String groupProtocol = args[6];
        String guarantee = args.length > 7 ? args[7] : StreamsConfig.EXACTLY_ONCE_V2;

        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
        p.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, groupProtocol);
        p.put(StreamsConfig.APPLICATION_SERVER_CONFIG, "127.0.0.1:" + httpPort);
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 1000);  // a kill leaves an open transaction behind
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        p.put(StreamsConfig.consumerPrefix("session.timeout.ms"), 10000);
        p.put(StreamsConfig.consumerPrefix("heartbeat.interval.ms"), 1000);
        p.put(StreamsConfig.producerPrefix("transaction.timeout.ms"), 10000);
        p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.String().getClass());
        p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.String().getClass());

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
               .flatMapValues(line -> Arrays.asList(line.toLowerCase(Locale.ROOT).split("\\W+")))
               .filter((k, word) -> !word.isEmpty())
               .groupBy((k, word) -> word, Grouped.with(Serdes.String(), Serdes.String()))
               .count(Materialized.as("counts"))
               .toStream()
               .to(output, Produced.with(Serdes.String(), Serdes.Long()));

        KafkaStreams streams = new KafkaStreams(builder.build(), p);
        CountDownLatch done = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            System.out.println("state " + before + " -> " + now);
            if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) done.countDown();
        });
        streams.setUncaughtExceptionHandler(e -> {
            System.out.println("uncaught " + e);
            e.printStackTrace(System.out);
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.REPLACE_THREAD;
        });

        HttpServer http = HttpServer.create(new InetSocketAddress("127.0.0.1", httpPort), 0);
        http.createContext("/state", ex -> answer(ex, 200, streams.state().toString()));
        http.createContext("/count", ex -> {
            String query = ex.getRequestURI().getQuery();
            String word = query == null ? "" : query.replaceFirst("^word=", "");
            try {
                KeyQueryMetadata meta = streams.queryMetadataForKey("counts", word, Serdes.String().serializer());
                if (meta == null || meta.activeHost() == null || meta.activeHost().port() != httpPort) {
                    answer(ex, 404, meta == null || meta.activeHost() == null ? "unknown" : meta.activeHost().toString());
                    return;
                }
                ReadOnlyKeyValueStore<String, Long> store = streams.store(
                    StoreQueryParameters.fromNameAndType("counts", QueryableStoreTypes.<String, Long>keyValueStore()));
                Long n = store.get(word);
                answer(ex, 200, String.valueOf(n == null ? 0 : n));
            } catch (RuntimeException e) {
                answer(ex, 503, e.toString());
            }
        });
        http.start();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(20));
            http.stop(0);
            done.countDown();
        }));
        streams.start();
        System.out.println("started " + appId + " http " + httpPort);
        done.await();
        System.out.println("final state " + streams.state());
        http.stop(0);
        streams.close(Duration.ofSeconds(10));
        System.exit(streams.state() == KafkaStreams.State.ERROR ? 1 : 0);
    }

    static void answer(HttpExchange ex, int status, String body) throws IOException {
        byte[] bytes = body.getBytes(StandardCharsets.UTF_8);
        ex.sendResponseHeaders(status, bytes.length);
        try (OutputStream out = ex.getResponseBody()) {
            out.write(bytes);
        }
    }
}
