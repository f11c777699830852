// The oracle of tests/unit/test_partition_oracle.py. For each line of stdin (the hex of a
// group id's UTF-8 bytes) it prints the id's length in UTF-16 code units, the JDK's
// String.hashCode, and the group's partition for each partition count given as an argument,
// computed as Apache Kafka's GroupCoordinatorService.partitionFor does:
// Utils.abs(groupId.hashCode()) % numPartitions. `abs` is Kafka's Utils.abs
// (clients/src/main/java/org/apache/kafka/common/utils/Utils.java), which maps
// Integer.MIN_VALUE to 0 where Math.abs would return it unchanged (negative).
// A single-file source program: java tests/unit/KafkaPartition.java 1 50 < ids.hex
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;

public class KafkaPartition {
    static int abs(int n) {
        return (n == Integer.MIN_VALUE) ? 0 : Math.abs(n);
    }

    public static void main(String[] args) throws Exception {
        int[] counts = new int[args.length];
        for (int i = 0; i < args.length; i++) {
            counts[i] = Integer.parseInt(args[i]);
        }
        BufferedReader in =
                new BufferedReader(new InputStreamReader(System.in, StandardCharsets.US_ASCII));
        StringBuilder out = new StringBuilder();
        for (String line; (line = in.readLine()) != null; ) {
            String id = new String(HexFormat.of().parseHex(line.strip()), StandardCharsets.UTF_8);
            int hash = id.hashCode();
            out.append(id.length()).append(' ').append(hash);
            for (int n : counts) {
                out.append(' ').append(abs(hash) % n);
            }
            out.append('\n');
        }
        System.out.print(out);
    }
}
